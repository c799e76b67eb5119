//! Kernels computed on the host for MLX's CPU backend (Linux without a GPU), where MLX evaluates
//! `exp` one scalar at a time, packs whole weights for a one-row product and pays a dispatch for
//! each of attention's small ops. Only `model/kernels.rs` calls in here, and only when it chose
//! the host at load; Metal and CUDA never do.

mod attention;
mod math;
#[cfg(target_arch = "x86_64")]
mod row_matmul;

pub(crate) use attention::{attend_chunk, attend_rows};
pub(crate) use math::{attention, gelu, padded_attention, silu};

use mlx_rs::Array;
use mlx_rs::error::Exception;

/// `x · weightᵀ (+ bias)` streamed on the host where that beats MLX's sgemm (a few f32 rows on an
/// x86 CPU with AVX2 and FMA); `None` leaves it to MLX.
#[cfg(target_arch = "x86_64")]
pub(crate) fn matmul_transposed(
    x: &Array,
    weight: &Array,
    bias: Option<&Array>,
) -> Result<Option<Array>, Exception> {
    row_matmul::matmul_transposed(x, weight, bias)
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn matmul_transposed(
    _x: &Array,
    _weight: &Array,
    _bias: Option<&Array>,
) -> Result<Option<Array>, Exception> {
    Ok(None)
}
