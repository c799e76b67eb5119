//! Qwen3 (mlx-lm's `qwen3.py`): Llama with an RMSNorm over each query and key head.

use super::llama;
use crate::model::blocks::attention::{AttentionSpec, HeadNorm};
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let eps = config.rms_norm_eps;
    let layers = llama::layers(config, weights, |_, attention| AttentionSpec {
        head_norm: Some(HeadNorm::Rms { eps }),
        ..attention
    })?;
    Decoder::load(weights, config, layers)
}
