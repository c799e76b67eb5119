//! Qwen3-MoE: Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder (mlx-lm's `qwen3_moe.py`). Qwen3's
//! attention; every `decoder_sparse_step`-th layer not in `mlp_only_layers` routes each position
//! to `num_experts_per_tok` of `num_experts` experts (softmax, then top k).

use crate::model::blocks::attention::{AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, unfuse_experts};
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

use super::qwen3_next;

/// The routed experts, `None` when `num_experts` is 0 (every layer dense).
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    qwen3_next::routed_experts(config, config.key_or("norm_topk_prob", false)?)
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let rope = Rope::for_config(config, weights)?;
    let moe = experts(config)?;
    let sparse_step: i32 = config.key_or("decoder_sparse_step", 1)?;
    let dense_layers: Vec<i32> = config.key_or("mlp_only_layers", Vec::new())?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let attention = AttentionSpec {
                head_norm: Some(HeadNorm::Rms {
                    eps: config.rms_norm_eps,
                }),
                ..AttentionSpec::new(config, rope.clone())
            };
            let sparse =
                sparse_step > 0 && !dense_layers.contains(&index) && (index + 1) % sparse_step == 0;
            DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
                let mlp = format!("{prefix}.mlp");
                let Some(moe) = moe.clone().filter(|_| sparse) else {
                    return Mlp::load(weights, config, &mlp, config.intermediate_size()?, false)
                        .map(FeedForward::Dense);
                };
                unfuse_experts(weights, &mlp)?;
                let names = ExpertNames::swiglu_under(&mlp);
                Moe::load(weights, config, &format!("{mlp}.gate"), names, moe)
                    .map(FeedForward::experts)
            })
        })
        .collect::<Result<_, _>>()?;
    Decoder::load(weights, config, layers)
}
