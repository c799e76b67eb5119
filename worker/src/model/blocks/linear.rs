//! Linear and embedding layers, dense or MLX-quantized in any of its modes (affine, mxfp4,
//! mxfp8, nvfp4).
//!
//! Each layer computes exactly what mlx-lm's `nn.Linear`, `nn.QuantizedLinear`, `nn.Embedding` and
//! `nn.QuantizedEmbedding` compute, op for op, so the logits agree with the reference.

use mlx_rs::error::Exception;
use mlx_rs::ops;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{Array, Dtype};

use crate::model::config::{GLOBAL_SCALE_UNSUPPORTED, Quantization};
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
            let weight = QuantizedWeight::load(weights, prefix, &shape, quantization)?;
            return Ok(Self::Quantized(weight));
        }
        let weight = weights.take_float(&format!("{prefix}.weight"), &[vocab_size, hidden_size])?;
        Ok(Self::Dense(weight))
    }

    /// Rows of the table for `ids` (any shape), with a trailing hidden axis.
    pub fn lookup(&self, ids: &Array) -> Result<Array, Exception> {
        match self {
            Self::Dense(weight) => weight.take_axis(ids, 0),
            // The gathered rows dequantized in the table's mode, as `nn.QuantizedEmbedding`.
            Self::Quantized(quantized) => quantized_ops::dequantize(
                &quantized.weight.take_axis(ids, 0)?,
                &quantized.scales.take_axis(ids, 0)?,
                quantized
                    .biases
                    .as_ref()
                    .map(|biases| biases.take_axis(ids, 0))
                    .transpose()?
                    .as_ref(),
                quantized.format,
            ),
        }
    }

    /// The tied output projection: hidden states times the table's transpose.
    pub fn as_linear(&self, x: &Array) -> Result<Array, Exception> {
        match self {
            Self::Dense(weight) => kernels::linear(x, weight, None),
            Self::Quantized(quantized) => quantized.matmul_transposed(x),
        }
    }

    /// The type of the rows a lookup gives: an affine table's scales', a float mode's MLX's
    /// default for `uint8` scales (bfloat16), which mlx-lm's hidden states then start in.
    pub fn dtype(&self) -> Dtype {
        match self {
            Self::Dense(weight) => weight.dtype(),
            Self::Quantized(quantized) if quantized.format.mode.float_scales() => {
                quantized.scales.dtype()
            }
            Self::Quantized(_) => Dtype::Bfloat16,
        }
    }
}

impl QuantizedWeight {
    /// `{prefix}.weight` packed from a float tensor of `shape` (`[.., rows, columns]`, columns
    /// grouped), with its scales and biases. The layer's own entry in config.json says how it
    /// is packed; a layer without one is read from its tensors, as mlx-lm 0.32.2 reads it
    /// (`infer_quant_config`), which config.json's model-wide entry must exist to allow.
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
        let scales_name = format!("{prefix}.scales");
        let file = weights.file_of(&weight_name);
        let bad = |message: String| ModelError::Quantization {
            path: file.clone(),
            message,
        };
        let global_scale = format!("{prefix}.global_scale");
        if weights.contains(&global_scale) {
            return Err(bad(format!(
                "{global_scale}: nvfp4 {GLOBAL_SCALE_UNSUPPORTED}"
            )));
        }
        let format = match (weights.quantization_of(prefix), quantization) {
            (Some(declared), _) => declared,
            (None, Some(model_wide)) => inferred(weights, prefix, columns).unwrap_or(model_wide),
            (None, None) => {
                return Err(bad(format!(
                    "{prefix} is quantized (has scales) but config.json has no quantization"
                )));
            }
        };
        let Quantization {
            group_size,
            bits,
            mode,
        } = format;
        if columns % group_size != 0 || (columns * bits) % 32 != 0 {
            return Err(bad(format!(
                "{prefix}: {columns} columns do not split into groups of {group_size} of {bits}-bit values ({})",
                mode.name()
            )));
        }
        let (weight, _) = weights.take_any(&weight_name)?;
        let packed = [leading, &[columns * bits / 32]].concat();
        if weight.dtype() != Dtype::Uint32 || weight.shape() != packed {
            return Err(bad(format!(
                "{weight_name} is {:?} {:?}, expected uint32 {packed:?} for {bits}-bit groups of {group_size} ({})",
                weight.dtype(),
                weight.shape(),
                mode.name()
            )));
        }
        let groups = [leading, &[columns / group_size]].concat();
        let (scales, biases) = if mode.float_scales() {
            (
                weights.take_float(&scales_name, &groups)?,
                Some(weights.take_float(&format!("{prefix}.biases"), &groups)?),
            )
        } else {
            let scales = weights.take(&scales_name, &groups)?;
            if scales.dtype() != Dtype::Uint8 {
                return Err(bad(format!(
                    "{scales_name} is {:?}, expected uint8 scales for {}",
                    scales.dtype(),
                    mode.name()
                )));
            }
            (scales, None)
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

/// How the layer's tensors say it is packed, where they say it unambiguously.
fn inferred(weights: &Weights, prefix: &str, columns: i32) -> Option<Quantization> {
    let packed = *weights.shape_of(&format!("{prefix}.weight"))?.last()?;
    let scales = format!("{prefix}.scales");
    let scale_columns = *weights.shape_of(&scales)?.last()?;
    let float_scales = weights.dtype_of(&scales)? != Dtype::Uint8;
    Quantization::inferred(columns, packed, scale_columns, float_scales)
}
