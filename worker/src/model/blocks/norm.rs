//! The normalizations architectures put around their blocks.

use mlx_rs::error::Exception;
use mlx_rs::{Array, fast, ops};

use crate::model::error::ModelError;
use crate::model::weights::Weights;

pub enum Norm {
    /// `x / rms(x) · w`, as Llama's `RMSNorm`. Gemma's `(1 + w)` scaling is folded into `weight`
    /// at load, so both run the same kernel.
    Rms { weight: Array, eps: f32 },
    /// `x / rms(x)`, without a weight (Llama 4's query and key norm).
    RmsUnweighted { eps: f32 },
    /// `x` as it is: a block without a pre-norm (OLMo 2 and 3 normalize only its output).
    Identity,
    /// `(x - mean(x)) / std(x) · w + b`, PyTorch's `LayerNorm` (vision towers).
    Layer {
        weight: Array,
        bias: Array,
        eps: f32,
    },
}

impl Norm {
    /// Llama's RMSNorm over the last axis of `size`, from `{name}` (the weight's full name).
    pub fn rms(weights: &mut Weights, name: &str, size: i32, eps: f32) -> Result<Self, ModelError> {
        Ok(Self::Rms {
            weight: weights.take_float(name, &[size])?,
            eps,
        })
    }

    /// RMSNorm by the stored weight times `factor` (Gemma 4's router: `scale · hidden^-0.5`).
    pub fn rms_times(
        weights: &mut Weights,
        name: &str,
        size: i32,
        eps: f32,
        factor: f32,
    ) -> Result<Self, ModelError> {
        let stored = weights.take_float(name, &[size])?;
        let weight = Array::from_f32(factor)
            .as_dtype(stored.dtype())
            .and_then(|factor| ops::multiply(&stored, &factor))
            .map_err(|source| weights.mlx_error("scaling a norm's weight", source))?;
        Ok(Self::Rms { weight, eps })
    }

    /// Gemma's RMSNorm, which scales by `1 + w`: the checkpoint stores the offset from one.
    pub fn rms_offset(
        weights: &mut Weights,
        name: &str,
        size: i32,
        eps: f32,
    ) -> Result<Self, ModelError> {
        let offset = weights.take_float(name, &[size])?;
        let weight = Array::from_f32(1.0)
            .as_dtype(offset.dtype())
            .and_then(|one| ops::add(&offset, &one))
            .map_err(|source| weights.mlx_error("adding one to a norm's weight", source))?;
        Ok(Self::Rms { weight, eps })
    }

    /// PyTorch's LayerNorm over the last axis of `size`, from `{prefix}.weight` and `.bias`.
    pub fn layer(
        weights: &mut Weights,
        prefix: &str,
        size: i32,
        eps: f32,
    ) -> Result<Self, ModelError> {
        Ok(Self::Layer {
            weight: weights.take_float(&format!("{prefix}.weight"), &[size])?,
            bias: weights.take_float(&format!("{prefix}.bias"), &[size])?,
            eps,
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        match self {
            Self::Rms { weight, eps } => fast::rms_norm(x, Some(weight), *eps),
            Self::RmsUnweighted { eps } => fast::rms_norm(x, None, *eps),
            Self::Identity => Ok(x.clone()),
            Self::Layer { weight, bias, eps } => {
                fast::layer_norm(x, Some(weight), Some(bias), *eps)
            }
        }
    }
}
