//! Seed-OSS (ByteDance's 36B; mlx-lm's `seed_oss.py`): Llama whose q, k and v carry biases by
//! `attention_bias` and whose output projection carries one by its own `attention_out_bias`.

use super::llama;
use crate::model::blocks::attention::AttentionSpec;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let qkv_bias = config.key_or("attention_bias", true)?;
    let o_bias = config.key_or("attention_out_bias", false)?;
    let layers = llama::layers(config, weights, |_, attention| AttentionSpec {
        qkv_bias,
        o_bias,
        ..attention
    })?;
    Decoder::load(weights, config, layers)
}
