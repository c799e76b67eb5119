//! Linear and embedding layers, dense or MLX-quantized (affine; mxfp4 for linear layers).
//!
//! Each layer computes exactly what mlx-lm's `nn.Linear`, `nn.QuantizedLinear`, `nn.Embedding` and
//! `nn.QuantizedEmbedding` compute, op for op, so the logits agree with the reference.

use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{self, dequantize};
use mlx_rs::{Array, Dtype};

use crate::model::config::{QuantMode, Quantization};
use crate::model::error::ModelError;
use crate::model::kernels;
use crate::model::quantized_ops::{self, Format};
use crate::model::weights::Weights;

pub struct QuantizedWeight {
    pub(super) weight: Array,
    pub(super) scales: Array,
    /// Affine mode's per-group offsets; the float modes have none.
    pub(super) biases: Option<Array>,
    pub(super) format: Format,
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
            let shape = [out_features, in_features];
            let weight = QuantizedWeight::load(weights, prefix, &shape, quantization)?;
            return Ok(Self::Quantized { weight, bias });
        }
        let weight =
            weights.take_float(&format!("{prefix}.weight"), &[out_features, in_features])?;
        Ok(Self::Dense { weight, bias })
    }

    /// A fused projection (`qkv_proj`, `gate_up_proj`) as the projections it stacks, by their
    /// output widths: rows are output features in both the dense and the quantized layouts.
    pub fn split_rows<const N: usize>(self, widths: [i32; N]) -> Result<[Self; N], Exception> {
        let mut starts = [0; N];
        for index in 1..N {
            starts[index] = starts[index - 1] + widths[index - 1];
        }
        let rows = |array: &Array, start: i32, width: i32| array.index((start..start + width, ..));
        let bias_rows = |bias: &Option<Array>, start: i32, width: i32| {
            bias.as_ref().map(|bias| bias.index(start..start + width))
        };
        let parts = std::array::from_fn(|index| {
            let (start, width) = (starts[index], widths[index]);
            match &self {
                Self::Dense { weight, bias } => Self::Dense {
                    weight: rows(weight, start, width),
                    bias: bias_rows(bias, start, width),
                },
                Self::Quantized { weight, bias } => Self::Quantized {
                    weight: QuantizedWeight {
                        weight: rows(&weight.weight, start, width),
                        scales: rows(&weight.scales, start, width),
                        biases: weight
                            .biases
                            .as_ref()
                            .map(|biases| rows(biases, start, width)),
                        format: weight.format,
                    },
                    bias: bias_rows(bias, start, width),
                },
            }
        });
        // Slices are views: copy them out so the fused tensor's memory is freed with it.
        for part in &parts {
            part.arrays().iter().try_for_each(|array| array.eval())?;
        }
        Ok(parts)
    }

    fn arrays(&self) -> Vec<&Array> {
        match self {
            Self::Dense { weight, bias } => std::iter::once(weight).chain(bias).collect(),
            Self::Quantized { weight, bias } => [&weight.weight, &weight.scales]
                .into_iter()
                .chain(&weight.biases)
                .chain(bias)
                .collect(),
        }
    }

    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        match self {
            Self::Dense { weight, bias } => kernels::linear(x, weight, bias.as_ref()),
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
            let shape = [vocab_size, hidden_size];
            // Named before the load takes the tensor.
            let file = weights.file_of(&format!("{prefix}.weight"));
            let weight = QuantizedWeight::load(weights, prefix, &shape, quantization)?;
            if weight.format.mode != QuantMode::Affine {
                return Err(ModelError::Quantization {
                    path: file,
                    message: format!(
                        "{prefix}: an embedding quantized as {} is not supported (only affine)",
                        weight.format.mode.name()
                    ),
                });
            }
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
                let biases = quantized
                    .biases
                    .as_ref()
                    .ok_or_else(|| Exception::custom("an affine embedding has biases"))?
                    .take_axis(ids, 0)?;
                let format = quantized.format;
                dequantize(&weight, &scales, &biases, format.group_size, format.bits)
            }
        }
    }

    /// The tied output projection: hidden states times the table's transpose.
    pub fn as_linear(&self, x: &Array) -> Result<Array, Exception> {
        match self {
            Self::Dense(weight) => kernels::linear(x, weight, None),
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

impl QuantizedWeight {
    /// `{prefix}.weight` packed from a float tensor of `shape` (`[.., rows, columns]`, columns
    /// grouped), with its scales and biases.
    pub(super) fn load(
        weights: &mut Weights,
        prefix: &str,
        shape: &[i32],
        quantization: Option<Quantization>,
    ) -> Result<Self, ModelError> {
        let (leading, columns) = match shape {
            [leading @ .., columns] => (leading, *columns),
            [] => (shape, 0),
        };
        let weight_name = format!("{prefix}.weight");
        let file = weights.file_of(&weight_name);
        let Some(Quantization {
            group_size,
            bits,
            mode,
        }) = weights.quantization_of(prefix).or(quantization)
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
        let packed = [leading, &[columns * bits / 32]].concat();
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
        let groups = [leading, &[columns / group_size]].concat();
        let scales_name = format!("{prefix}.scales");
        let (scales, biases) = match mode {
            QuantMode::Affine => (
                weights.take_float(&scales_name, &groups)?,
                Some(weights.take_float(&format!("{prefix}.biases"), &groups)?),
            ),
            QuantMode::Mxfp4 => {
                let scales = weights.take(&scales_name, &groups)?;
                if scales.dtype() != Dtype::Uint8 {
                    return Err(ModelError::Quantization {
                        path: file,
                        message: format!(
                            "{scales_name} is {:?}, expected uint8 exponents for mxfp4",
                            scales.dtype()
                        ),
                    });
                }
                (scales, None)
            }
        };
        Ok(Self {
            weight,
            scales,
            biases,
            format: Format {
                mode,
                group_size,
                bits,
            },
        })
    }

    fn matmul_transposed(&self, x: &Array) -> Result<Array, Exception> {
        quantized_ops::matmul_transposed(
            x,
            &self.weight,
            &self.scales,
            self.biases.as_ref(),
            self.format,
        )
    }
}
