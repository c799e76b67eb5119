//! Qwen2 and Qwen2.5 (mlx-lm's `qwen2.py`): Llama with biases on q, k and v.

use super::llama;
use crate::model::blocks::attention::AttentionSpec;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let layers = llama::layers(config, weights, |_, attention| AttentionSpec {
        qkv_bias: true,
        o_bias: false,
        ..attention
    })?;
    Decoder::load(weights, config, layers)
}
