//! The normalizations architectures put around their blocks.

use mlx_rs::error::Exception;
use mlx_rs::{Array, fast};

use crate::model::error::ModelError;
use crate::model::weights::Weights;

pub enum Norm {
    /// `x / rms(x) · w`, as Llama's `RMSNorm`.
    Rms { weight: Array, eps: f32 },
}

impl Norm {
    /// Llama's RMSNorm over the last axis of `size`, from `{name}` (the weight's full name).
    pub fn rms(weights: &mut Weights, name: &str, size: i32, eps: f32) -> Result<Self, ModelError> {
        Ok(Self::Rms {
            weight: weights.take_float(name, &[size])?,
            eps,
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        match self {
            Self::Rms { weight, eps } => fast::rms_norm(x, Some(weight), *eps),
        }
    }
}
