//! MLX's quantized products and dequantization in any of its modes. mlx-rs 0.33 passes
//! `affine` to MLX whatever the weights are, so the float modes (mxfp4, mxfp8, nvfp4) call mlx-c
//! directly, as mlx-rs itself does.

use mlx_rs::error::Exception;
use mlx_rs::{Array, Stream, ops};

use super::config::QuantMode;

/// How a quantized weight is stored: its mode, group size and bits.
#[derive(Clone, Copy)]
pub struct Format {
    pub mode: QuantMode,
    pub group_size: i32,
    pub bits: i32,
}

/// `x · wᵀ` for a quantized `w` (`biases` only in affine mode): a linear layer.
pub fn matmul_transposed(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    format: Format,
) -> Result<Array, Exception> {
    matmul(x, w, scales, biases, true, format)
}

/// `x · wᵀ`, or with `transpose` false `x · w`, for a quantized `w` (`biases` only in affine
/// mode).
pub fn matmul(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    transpose: bool,
    format: Format,
) -> Result<Array, Exception> {
    if format.mode == QuantMode::Affine {
        return ops::quantized_matmul(
            x,
            w,
            scales,
            biases,
            transpose,
            format.group_size,
            format.bits,
        );
    }
    let mode = mode_name(format.mode);
    let stream = Stream::thread_local_or_default();
    // SAFETY: every handle is a live array or stream for the call's duration; `res` starts as
    // an empty array that mlx-c fills on success and that `Array` then owns.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_quantized_matmul(
            &mut res,
            x.as_ptr(),
            w.as_ptr(),
            scales.as_ptr(),
            biases.map_or_else(|| mlx_sys::mlx_array_new(), Array::as_ptr),
            transpose,
            optional(format.group_size),
            optional(format.bits),
            mode.as_ptr(),
            stream.as_ptr(),
        );
        finish(res, status, "quantized_matmul")
    }
}

/// `x · w[index]ᵀ` for each row and the expert `rhs_indices` names, over stacked quantized
/// experts `w` (`[experts, out, in]` packed).
pub fn gather_matmul_transposed(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    rhs_indices: &Array,
    sorted: bool,
    format: Format,
) -> Result<Array, Exception> {
    if format.mode == QuantMode::Affine {
        return ops::gather_qmm(
            x,
            w,
            scales,
            biases,
            None,
            rhs_indices,
            true,
            format.group_size,
            format.bits,
            sorted,
        );
    }
    let mode = mode_name(format.mode);
    let stream = Stream::thread_local_or_default();
    // SAFETY: as in `matmul`; an empty array stands for the absent lhs indices.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_gather_qmm(
            &mut res,
            x.as_ptr(),
            w.as_ptr(),
            scales.as_ptr(),
            biases.map_or_else(|| mlx_sys::mlx_array_new(), Array::as_ptr),
            mlx_sys::mlx_array_new(),
            rhs_indices.as_ptr(),
            true,
            optional(format.group_size),
            optional(format.bits),
            mode.as_ptr(),
            sorted,
            stream.as_ptr(),
        );
        finish(res, status, "gather_qmm")
    }
}

/// `w`'s values (rows gathered or whole) as floats: in affine mode of the scales' type, in a
/// float mode of MLX's default for `uint8` scales (bfloat16), as Python's `mx.dequantize`.
pub fn dequantize(
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    format: Format,
) -> Result<Array, Exception> {
    if format.mode == QuantMode::Affine {
        return ops::dequantize(w, scales, biases, format.group_size, format.bits);
    }
    let mode = mode_name(format.mode);
    let stream = Stream::thread_local_or_default();
    // SAFETY: as in `matmul`; empty arrays stand for the absent biases and global scale, and an
    // absent dtype lets MLX choose, as Python's default does.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_dequantize(
            &mut res,
            w.as_ptr(),
            scales.as_ptr(),
            biases.map_or_else(|| mlx_sys::mlx_array_new(), Array::as_ptr),
            optional(format.group_size),
            optional(format.bits),
            mode.as_ptr(),
            mlx_sys::mlx_array_new(),
            mlx_sys::mlx_optional_dtype {
                value: mlx_sys::mlx_dtype__MLX_FLOAT32,
                has_value: false,
            },
            stream.as_ptr(),
        );
        finish(res, status, "dequantize")
    }
}

fn mode_name(mode: QuantMode) -> &'static std::ffi::CStr {
    match mode {
        QuantMode::Affine => c"affine",
        QuantMode::Mxfp4 => c"mxfp4",
        QuantMode::Mxfp8 => c"mxfp8",
        QuantMode::Nvfp4 => c"nvfp4",
    }
}

fn optional(value: i32) -> mlx_sys::mlx_optional_int {
    mlx_sys::mlx_optional_int {
        value,
        has_value: true,
    }
}

/// The array mlx-c wrote into `res`, or the failure of `operation`.
///
/// # Safety
/// `res` is an array handle mlx-c returned through the call whose `status` this is.
unsafe fn finish(
    res: mlx_sys::mlx_array,
    status: i32,
    operation: &str,
) -> Result<Array, Exception> {
    // SAFETY: the caller's handle; `Array` frees it when dropped.
    let array = unsafe { Array::from_ptr(res) };
    if status != 0 {
        return Err(Exception::custom(format!("MLX {operation} failed")));
    }
    Ok(array)
}
