//! Granite 3 (mlx-lm's `granite.py`): Llama with four multipliers: on the embedding
//! (`embedding_multiplier`), as the attention scale (`attention_multiplier`), on each block's
//! output before its residual sum (`residual_multiplier`), and dividing the logits
//! (`logits_scaling`).

use serde::Deserialize;

use super::llama;
use crate::model::blocks::attention::AttentionSpec;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// Granite's own keys, defaulting as transformers' `GraniteConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    attention_multiplier: f32,
    residual_multiplier: f32,
    embedding_multiplier: f32,
    logits_scaling: f32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            attention_multiplier: 1.0,
            residual_multiplier: 1.0,
            embedding_multiplier: 1.0,
            logits_scaling: 1.0,
        }
    }
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let (attention_scale, residual_scale) = (args.attention_multiplier, args.residual_multiplier);
    let mut layers = llama::layers(config, weights, |_, attention| AttentionSpec {
        scale: attention_scale,
        ..attention
    })?;
    for layer in &mut layers {
        layer.residual_scale = Some(residual_scale);
    }
    let mut decoder = Decoder::load(weights, config, layers)?;
    decoder.embedding_scale = Some(args.embedding_multiplier);
    decoder.logit_scale = Some(1.0 / args.logits_scaling);
    Ok(decoder)
}
