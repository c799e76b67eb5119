//! Granite 3 (mlx-lm's `granite.py`): Llama with four multipliers: on the embedding
//! (`embedding_multiplier`), as the attention scale (`attention_multiplier`), on each block's
//! output before its residual sum (`residual_multiplier`), and dividing the logits
//! (`logits_scaling`).

use super::llama;
use crate::model::blocks::attention::AttentionSpec;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let attention_scale: f32 = config.key_or("attention_multiplier", 1.0)?;
    let residual_scale: f32 = config.key_or("residual_multiplier", 1.0)?;
    let mut layers = llama::layers(config, weights, |_, attention| AttentionSpec {
        scale: attention_scale,
        ..attention
    })?;
    for layer in &mut layers {
        layer.residual_scale = Some(residual_scale);
    }
    let mut decoder = Decoder::load(weights, config, layers)?;
    decoder.embedding_scale = Some(config.key_or("embedding_multiplier", 1.0)?);
    decoder.logit_scale = Some(1.0 / config.key_or("logits_scaling", 1.0f32)?);
    Ok(decoder)
}
