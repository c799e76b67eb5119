//! Qwen3.5 and Qwen3.6 mixtures of experts, Qwen3.6-35B-A3B among them (mlx-lm's
//! `qwen3_5_moe.py`): Qwen3.5 with every layer's MLP a mixture of experts plus a gated shared
//! expert. The original checkpoints fuse each layer's experts as `experts.gate_up_proj`
//! (`[experts, 2 × inner, hidden]`, gate rows first) and `experts.down_proj`; they are split
//! and renamed to the stacked layout here, as mlx-lm's `sanitize` does.

use crate::model::blocks::moe::unfuse_experts;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    for index in 0..config.num_layers {
        unfuse_experts(weights, &format!("model.layers.{index}.mlp"))?;
    }
    super::qwen3_5::build(config, weights)
}
