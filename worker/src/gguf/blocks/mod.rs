//! Tensors read from a GGUF's raw blocks into what MLX holds, so no type is ever inflated to
//! float16 behind the user's back:
//! - floats (`F32`, `F16`, `BF16`) as they are;
//! - the types whose groups of 32 are MLX affine groups (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`,
//!   `Q4_K`, `Q5_K`) repacked: the legacy types exactly (MLX's dequantized values equal
//!   llama.cpp's bit for bit); the K-quants with their scales rounded to f16 unless
//!   [`Choices::exact_k_quants`] asks for exact (see [`scale_dtype`]);
//! - `MXFP4` onto MLX's `mxfp4` mode, exactly;
//! - the rest llama.cpp's recipes write (`Q2_K`, `Q3_K`, `Q6_K`: scales per 16 values; `IQ4_NL`,
//!   `IQ4_XS`: a non-uniform table) dequantized as llama.cpp does and requantized, as
//!   [`Requantize`] says.
//!
//! The caller has checked the tensor against the file; every length is checked again here
//! before a block is read.

mod groups;
mod iq;
mod k_quants;
mod legacy;
mod mxfp4;
mod requantize;

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype};

use super::ggml_type::GgmlType;
use groups::Groups;
pub use requantize::Requantize;

/// How a GGUF's quantized tensors reach MLX: `[models.ID] gguf_requantize` and
/// `gguf_exact_k_quants` in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Choices {
    pub requantize: Requantize,
    /// Q4_K and Q5_K with their scales in the compute type, so their values are llama.cpp's bit
    /// for bit on the CPU, at 6 bits a value (Q4_K) instead of 5.
    pub exact_k_quants: bool,
}

impl Choices {
    /// Every combination, as `corral-worker describe` sizes them.
    pub fn all() -> impl Iterator<Item = Self> {
        Requantize::ALL.into_iter().flat_map(|requantize| {
            [false, true].map(|exact_k_quants| Self {
                requantize,
                exact_k_quants,
            })
        })
    }

    /// The key of this combination in a description's `gguf_loaded_bytes`.
    pub fn key(self) -> String {
        corral_ipc::describe::gguf_loaded_key(&self.requantize.to_string(), self.exact_k_quants)
    }
}

/// One tensor as MLX holds it.
pub enum Loaded {
    Plain(Array),
    Affine {
        weight: Array,
        scales: Array,
        biases: Array,
        bits: i32,
    },
    Mxfp4 {
        weight: Array,
        scales: Array,
    },
}

/// How a type reaches MLX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Float(Dtype),
    Exact { bits: u32 },
    Mxfp4,
    Requantized,
}

pub fn route(ggml_type: GgmlType) -> Option<Route> {
    if let Some(bits) = legacy::bits(ggml_type) {
        return Some(Route::Exact { bits });
    }
    Some(match ggml_type {
        GgmlType::F32 => Route::Float(Dtype::Float32),
        GgmlType::F16 => Route::Float(Dtype::Float16),
        GgmlType::BF16 => Route::Float(Dtype::Bfloat16),
        GgmlType::Q4_K => Route::Exact { bits: 4 },
        GgmlType::Q5_K => Route::Exact { bits: 5 },
        GgmlType::MXFP4 => Route::Mxfp4,
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q6_K | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            Route::Requantized
        }
        _ => return None,
    })
}

/// The type a tensor's affine scales and biases are stored in, given `compute`, the type the
/// forward pass runs in (`weights::scale_dtype`). `quantized_matmul` widens 16-bit scales to the
/// input's type, so where f16 holds a scale exactly a projection's output is the same either way
/// and only the stored bytes differ: at group 32, f32 scales and biases are 2 bits a value, f16
/// ones 1.
/// - The legacy types' scale and bias (`d`, `-8d`, `-16d`, `-128d`, `m`) are f16 values times a
///   power of two: f16 holds them exactly (a tensor where one would overflow keeps f32, in
///   [`load`]).
/// - The K-quants' `d * sc` and `dmin * m` need up to 17 significant bits. f16 rounds them by
///   1.7e-4 (Q4_K) and 2.1e-4 (Q5_K) relative, under a hundredth of what 4-bit quantization
///   itself moves a weight; f32 would make a Q4_K_M model 1.34 times its file instead of 1.17
///   (measured in `blocks/tests.rs` and by `scripts/gguf_memory.sh`). So they take f16, and
///   `compute` when `exact_k_quants` asks for llama.cpp's values bit for bit.
/// - Requantized tensors are not exact anyway: f16 adds a rounding a tenth of the 8-bit
///   requantization's own (measured in `blocks/tests.rs`).
/// - The token embedding keeps `compute`: its lookup dequantizes rows in the scales' type, and
///   the model takes its type from the embedding.
pub fn scale_dtype(
    ggml_type: GgmlType,
    compute: Dtype,
    embedding: bool,
    exact_k_quants: bool,
) -> Dtype {
    let k_quant = matches!(ggml_type, GgmlType::Q4_K | GgmlType::Q5_K);
    if embedding || (k_quant && exact_k_quants) {
        compute
    } else {
        Dtype::Float16
    }
}

/// Reads a tensor of `shape` (MLX order) and type `ggml_type` from its `bytes`. Affine scales
/// and biases come out in `scale_dtype`, or f32 where a legacy type's would not fit f16.
pub fn load(
    ggml_type: GgmlType,
    shape: &[i32],
    bytes: &[u8],
    requantize: Requantize,
    scale_dtype: Dtype,
) -> Result<Loaded, String> {
    let route = route(ggml_type).ok_or_else(|| format!("{ggml_type} is not served"))?;
    let values = shape.iter().map(|&dim| dim as usize).product::<usize>();
    let expected = ggml_type
        .bytes_for(values as u64)
        .ok_or_else(|| format!("{values} values do not fill whole {ggml_type} blocks"))?;
    if bytes.len() as u64 != expected {
        return Err(format!(
            "{} bytes where {values} values of {ggml_type} take {expected}",
            bytes.len()
        ));
    }
    let mlx = |error: Exception| format!("MLX failed: {error}");
    let columns = shape.last().copied().unwrap_or(1);
    let grouped = |count: usize| -> Vec<i32> {
        let mut dims = shape.to_vec();
        if let Some(last) = dims.last_mut() {
            *last = count as i32;
        }
        dims
    };
    match route {
        Route::Float(dtype) => Ok(Loaded::Plain(
            Array::from_slice(bytes, &[bytes.len() as i32])
                .view_dtype(dtype)
                .and_then(|array| array.reshape(shape))
                .map_err(mlx)?,
        )),
        Route::Exact { bits } => {
            let groups = exact_groups(ggml_type, bits, bytes, values);
            let legacy = legacy::bits(ggml_type).is_some();
            let scale_dtype = if scale_dtype == Dtype::Float16 && legacy && !groups.fit_f16() {
                Dtype::Float32
            } else {
                scale_dtype
            };
            let words = groups.packed();
            let per_row = columns as usize * bits as usize / 32;
            let scale_shape = grouped(columns as usize / groups::GROUP);
            let to_scales =
                |values: &[f32]| Array::from_slice(values, &scale_shape).as_dtype(scale_dtype);
            Ok(Loaded::Affine {
                weight: Array::from_slice(&words, &grouped(per_row)),
                scales: to_scales(&groups.scales).map_err(mlx)?,
                biases: to_scales(&groups.biases).map_err(mlx)?,
                bits: bits as i32,
            })
        }
        Route::Mxfp4 => {
            let (words, exponents) = mxfp4::repack(bytes);
            Ok(Loaded::Mxfp4 {
                weight: Array::from_slice(&words, &grouped(columns as usize / 8)),
                scales: Array::from_slice(&exponents, &grouped(columns as usize / groups::GROUP)),
            })
        }
        Route::Requantized => {
            let columns = columns as usize;
            let rows = values / columns.max(1);
            let block_values = ggml_type.block_values().unwrap_or(1) as usize;
            let block_bytes = bytes.len() / (values / block_values).max(1);
            let row_bytes = columns / block_values * block_bytes;
            let bits = requantize.bits();
            let parts = requantize::requantize(rows, columns, bits, |range, out| {
                let chunk = &bytes[range.start * row_bytes..range.end * row_bytes];
                dequantize_into(ggml_type, chunk, out);
            })
            .map_err(mlx)?;
            let reshape = |array: &Array, count: usize| array.reshape(&grouped(count));
            match (bits, parts.as_slice()) {
                (None, [plain]) => Ok(Loaded::Plain(plain.reshape(shape).map_err(mlx)?)),
                (Some(bits), [weight, scales, biases]) => {
                    let per_row = columns * bits as usize / 32;
                    let groups = columns / groups::GROUP;
                    Ok(Loaded::Affine {
                        weight: reshape(weight, per_row).map_err(mlx)?,
                        scales: reshape(scales, groups)
                            .and_then(|a| a.as_dtype(scale_dtype))
                            .map_err(mlx)?,
                        biases: reshape(biases, groups)
                            .and_then(|a| a.as_dtype(scale_dtype))
                            .map_err(mlx)?,
                        bits,
                    })
                }
                _ => Err("an empty tensor".into()),
            }
        }
    }
}

/// The affine groups of a tensor of an exact type.
fn exact_groups(ggml_type: GgmlType, bits: u32, bytes: &[u8], values: usize) -> Groups {
    let mut groups = Groups::with_capacity(bits, values);
    let block_bytes = block_bytes(ggml_type);
    for block in bytes.chunks_exact(block_bytes) {
        match ggml_type {
            GgmlType::Q4_K | GgmlType::Q5_K => k_quants::push_block(ggml_type, block, &mut groups),
            _ => legacy::push_block(ggml_type, block, &mut groups),
        }
    }
    groups
}

fn block_bytes(ggml_type: GgmlType) -> usize {
    let values = ggml_type.block_values().unwrap_or(1);
    ggml_type.bytes_for(values).unwrap_or(0) as usize
}

/// llama.cpp's dequantization of any served block type, in f32; `None` for a float or unserved
/// type. `bytes` must hold whole blocks. The tests' view of every decoder; loading goes through
/// [`load`].
#[cfg(test)]
pub fn dequantize(ggml_type: GgmlType, bytes: &[u8]) -> Option<Vec<f32>> {
    let block_values = ggml_type.block_values()? as usize;
    let count = bytes.len() / block_bytes(ggml_type).max(1) * block_values;
    let mut out = vec![0.0; count];
    match route(ggml_type)? {
        Route::Float(_) => return None,
        Route::Exact { bits } => {
            return Some(exact_groups(ggml_type, bits, bytes, count).dequantized());
        }
        Route::Mxfp4 => return Some(mxfp4::dequantize(bytes)),
        Route::Requantized => dequantize_into(ggml_type, bytes, &mut out),
    }
    Some(out)
}

/// Dequantizes whole blocks of a requantized type into `out`.
fn dequantize_into(ggml_type: GgmlType, bytes: &[u8], out: &mut [f32]) {
    let block_values = ggml_type.block_values().unwrap_or(1) as usize;
    for (block, out) in bytes
        .chunks_exact(block_bytes(ggml_type))
        .zip(out.chunks_exact_mut(block_values))
    {
        match ggml_type {
            GgmlType::IQ4_NL | GgmlType::IQ4_XS => iq::dequantize_block(ggml_type, block, out),
            _ => k_quants::dequantize_block(ggml_type, block, out),
        }
    }
}

/// Bytes a tensor of `values` values of `ggml_type` takes once loaded, with scales of
/// `scale_bytes` each; `None` for a type that is not served.
pub fn loaded_bytes(
    ggml_type: GgmlType,
    values: u64,
    requantize: Requantize,
    scale_bytes: u64,
) -> Option<u64> {
    let groups = values / groups::GROUP as u64;
    let affine = |bits: u64| values * bits / 8 + 2 * groups * scale_bytes;
    Some(match route(ggml_type)? {
        Route::Float(Dtype::Float32) => values * 4,
        Route::Float(_) => values * 2,
        Route::Exact { bits } => affine(u64::from(bits)),
        Route::Mxfp4 => values / 2 + groups,
        Route::Requantized => match requantize.bits() {
            Some(bits) => affine(bits as u64),
            None => values * 2,
        },
    })
}

#[cfg(test)]
mod tests;
