//! Linear and embedding layers, dense or MLX affine-quantized.
//!
//! Each layer computes exactly what mlx-lm's `nn.Linear`, `nn.QuantizedLinear`, `nn.Embedding` and
//! `nn.QuantizedEmbedding` compute, op for op, so the logits agree with the reference.

use mlx_rs::error::Exception;
use mlx_rs::ops::{self, dequantize, quantized_matmul};
use mlx_rs::{Array, Dtype};

use super::ModelError;
use super::config::Quantization;
use super::weights::Weights;

pub struct QuantizedWeight {
    weight: Array,
    scales: Array,
    biases: Array,
    group_size: i32,
    bits: i32,
}

pub enum Linear {
    Dense {
        weight: Array,
        bias: Option<Array>,
    },
    Quantized {
        weight: QuantizedWeight,
        bias: Option<Array>,
    },
}

pub enum Embedding {
    Dense(Array),
    Quantized(QuantizedWeight),
}

impl Linear {
    /// Loads `{prefix}.weight` as an `[out, in]` projection, quantized if `{prefix}.scales` exists.
    pub fn load(
        weights: &mut Weights,
        prefix: &str,
        out_features: i32,
        in_features: i32,
        has_bias: bool,
        quantization: Option<Quantization>,
    ) -> Result<Self, ModelError> {
        let bias = if has_bias {
            Some(weights.take_float(&format!("{prefix}.bias"), &[out_features])?)
        } else {
            None
        };
        if weights.contains(&format!("{prefix}.scales")) {
            let weight =
                QuantizedWeight::load(weights, prefix, out_features, in_features, quantization)?;
            return Ok(Self::Quantized { weight, bias });
        }
        let weight =
            weights.take_float(&format!("{prefix}.weight"), &[out_features, in_features])?;
        Ok(Self::Dense { weight, bias })
    }

    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        match self {
            Self::Dense { weight, bias } => dense_product(x, weight, bias.as_ref()),
            Self::Quantized { weight, bias } => {
                let output = weight.matmul_transposed(x)?;
                match bias {
                    Some(bias) => ops::add(&output, bias),
                    None => Ok(output),
                }
            }
        }
    }
}

impl Embedding {
    pub fn load(
        weights: &mut Weights,
        prefix: &str,
        vocab_size: i32,
        hidden_size: i32,
        quantization: Option<Quantization>,
    ) -> Result<Self, ModelError> {
        if weights.contains(&format!("{prefix}.scales")) {
            let weight =
                QuantizedWeight::load(weights, prefix, vocab_size, hidden_size, quantization)?;
            return Ok(Self::Quantized(weight));
        }
        let weight = weights.take_float(&format!("{prefix}.weight"), &[vocab_size, hidden_size])?;
        Ok(Self::Dense(weight))
    }

    /// Rows of the table for `ids` (any shape), with a trailing hidden axis.
    pub fn lookup(&self, ids: &Array) -> Result<Array, Exception> {
        match self {
            Self::Dense(weight) => weight.take_axis(ids, 0),
            Self::Quantized(quantized) => {
                let weight = quantized.weight.take_axis(ids, 0)?;
                let scales = quantized.scales.take_axis(ids, 0)?;
                let biases = quantized.biases.take_axis(ids, 0)?;
                dequantize(
                    &weight,
                    &scales,
                    &biases,
                    quantized.group_size,
                    quantized.bits,
                )
            }
        }
    }

    /// The tied output projection: hidden states times the table's transpose.
    pub fn as_linear(&self, x: &Array) -> Result<Array, Exception> {
        match self {
            Self::Dense(weight) => dense_product(x, weight, None),
            Self::Quantized(quantized) => quantized.matmul_transposed(x),
        }
    }

    pub fn dtype(&self) -> Dtype {
        match self {
            Self::Dense(weight) => weight.dtype(),
            Self::Quantized(quantized) => quantized.scales.dtype(),
        }
    }
}

/// `x · weightᵀ (+ bias)` for an unquantized weight: on the host where that is faster, else MLX.
fn dense_product(x: &Array, weight: &Array, bias: Option<&Array>) -> Result<Array, Exception> {
    if let Some(product) = host_product(x, weight, bias)? {
        return Ok(product);
    }
    match bias {
        Some(bias) => ops::addmm(bias, x, weight.t(), None, None),
        None => ops::matmul(x, weight.t()),
    }
}

/// `x · weightᵀ (+ bias)` computed on the host where that beats MLX's matmul (a few rows on an
/// x86 CPU, see `row_matmul`); `None` leaves it to MLX.
#[cfg(target_arch = "x86_64")]
fn host_product(
    x: &Array,
    weight: &Array,
    bias: Option<&Array>,
) -> Result<Option<Array>, Exception> {
    super::row_matmul::matmul_transposed(x, weight, bias)
}

#[cfg(not(target_arch = "x86_64"))]
fn host_product(
    _x: &Array,
    _weight: &Array,
    _bias: Option<&Array>,
) -> Result<Option<Array>, Exception> {
    Ok(None)
}

impl QuantizedWeight {
    fn load(
        weights: &mut Weights,
        prefix: &str,
        rows: i32,
        columns: i32,
        quantization: Option<Quantization>,
    ) -> Result<Self, ModelError> {
        let weight_name = format!("{prefix}.weight");
        let file = weights.file_of(&weight_name).unwrap_or_default();
        let Some(Quantization { group_size, bits }) =
            weights.quantization_of(prefix).or(quantization)
        else {
            return Err(ModelError::Quantization {
                path: file,
                message: format!(
                    "{prefix} is quantized (has scales) but config.json has no quantization"
                ),
            });
        };
        if columns % group_size != 0 || (columns * bits) % 32 != 0 {
            return Err(ModelError::Quantization {
                path: file,
                message: format!(
                    "{prefix}: {columns} columns do not split into groups of {group_size} of {bits}-bit values"
                ),
            });
        }
        let (weight, _) = weights.take_any(&weight_name)?;
        let packed = [rows, columns * bits / 32];
        if weight.dtype() != Dtype::Uint32 || weight.shape() != packed {
            return Err(ModelError::Quantization {
                path: file,
                message: format!(
                    "{weight_name} is {:?} {:?}, expected uint32 {packed:?} for {bits}-bit groups of {group_size}",
                    weight.dtype(),
                    weight.shape()
                ),
            });
        }
        let groups = [rows, columns / group_size];
        let scales = weights.take_float(&format!("{prefix}.scales"), &groups)?;
        let biases = weights.take_float(&format!("{prefix}.biases"), &groups)?;
        Ok(Self {
            weight,
            scales,
            biases,
            group_size,
            bits,
        })
    }

    fn matmul_transposed(&self, x: &Array) -> Result<Array, Exception> {
        quantized_matmul(
            x,
            &self.weight,
            &self.scales,
            &self.biases,
            true,
            self.group_size,
            self.bits,
        )
    }
}
