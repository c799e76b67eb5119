//! Seed-OSS (ByteDance's 36B; mlx-lm's `seed_oss.py`): Llama whose q, k and v carry biases by
//! `attention_bias` and whose output projection carries one by its own `attention_out_bias`.

use serde::Deserialize;

use super::llama;
use crate::model::blocks::attention::AttentionSpec;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// Seed-OSS's own keys, defaulting as transformers' `SeedOssConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    attention_bias: bool,
    attention_out_bias: bool,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            attention_bias: true,
            attention_out_bias: false,
        }
    }
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let (qkv_bias, o_bias) = (args.attention_bias, args.attention_out_bias);
    let layers = llama::layers(config, weights, |_, attention| AttentionSpec {
        qkv_bias,
        o_bias,
        ..attention
    })?;
    Decoder::load(weights, config, layers)
}
