//! A projection per head (mlx-lm's `MultiLinear`): weights `[heads, out, in]`, dense or
//! MLX-quantized in any of its modes, applied to each head's rows by broadcasting, or by the transposed
//! weights to go the other way (latent attention projects queries into the latent space with it
//! and the latent back out with its transpose).

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;

use super::linear::QuantizedWeight;
use crate::model::config::Quantization;
use crate::model::error::ModelError;
use crate::model::quantized_ops;
use crate::model::weights::Weights;

pub enum MultiLinear {
    Dense(Array),
    Quantized(QuantizedWeight),
}

impl MultiLinear {
    /// `{prefix}.weight` as `[heads, out, in]`, quantized if `{prefix}.scales` exists.
    pub fn load(
        weights: &mut Weights,
        prefix: &str,
        shape: [i32; 3],
        quantization: Option<Quantization>,
    ) -> Result<Self, ModelError> {
        if weights.contains(&format!("{prefix}.scales")) {
            let weight = QuantizedWeight::load(weights, prefix, &shape, quantization)?;
            return Ok(Self::Quantized(weight));
        }
        Ok(Self::Dense(
            weights.take_float(&format!("{prefix}.weight"), &shape)?,
        ))
    }

    /// `x · wᵀ` per head (`x` `[.., heads, positions, in]` → `[.., heads, positions, out]`), or
    /// with `transpose` false `x · w` (`x` `[.., positions, out]` → `[.., heads, positions, in]`).
    pub fn forward(&self, x: &Array, transpose: bool) -> Result<Array, Exception> {
        match self {
            Self::Dense(weight) if transpose => ops::matmul(x, &weight.swap_axes(-1, -2)?),
            Self::Dense(weight) => ops::matmul(x, weight),
            Self::Quantized(quantized) => quantized_ops::matmul(
                x,
                &quantized.weight,
                &quantized.scales,
                quantized.biases.as_ref(),
                transpose,
                quantized.format,
            ),
        }
    }
}
