//! MiniMax-M2 (mlx-lm's `minimax.py`): attention whose queries and keys are each RMS-normalized
//! over all their heads together, a rotation of the first `partial_rotary_factor` (older
//! configs: `rotary_dim`) of each head; every layer routes each position to
//! `num_experts_per_tok` of `num_local_experts` experts chosen by sigmoid score plus the block's
//! `e_score_correction_bias`, weighted by their renormalized scores. The experts are named as
//! Mixtral's (`block_sparse_moe.experts.{e}.w1`...).

use super::mixtral::expert_names;
use crate::model::blocks::attention::{AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::moe::{Moe, MoeSpec, Routing};
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    moe(config).map(Some)
}

fn moe(config: &ModelConfig) -> Result<MoeSpec, ModelError> {
    Ok(MoeSpec::new(
        config.key_named_or(&["num_local_experts", "num_experts"], 256)?,
        config.key_or("num_experts_per_tok", 8)?,
        config.intermediate_size()?,
        // One group: the sigmoid routing of GLM-4.5's `noaux_tc` without its group choice.
        Routing::GroupedSigmoid {
            groups: 1,
            top_groups: 1,
            normalize: true,
            scaling: 1.0,
        },
    ))
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let rotary_dim: Option<f64> = config.key("rotary_dim")?;
    let partial = match rotary_dim {
        Some(dims) => dims / f64::from(config.head_dim),
        None => config.rope_key_or("partial_rotary_factor", 1.0)?,
    };
    let rope = Rope::partial_for_config(config, weights, partial, false)?;
    let moe = moe(config)?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let attention = AttentionSpec {
                head_norm: Some(HeadNorm::RmsWhole {
                    eps: config.rms_norm_eps,
                }),
                ..AttentionSpec::new(config, rope.clone())
            };
            DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
                let block = format!("{prefix}.block_sparse_moe");
                // The correction bias sits on the block; the router's loader reads it beside
                // the router.
                weights.rename(
                    &format!("{block}.e_score_correction_bias"),
                    &format!("{block}.gate.e_score_correction_bias"),
                );
                Moe::load(
                    weights,
                    config,
                    &format!("{block}.gate"),
                    expert_names(&block),
                    moe.clone(),
                )
                .map(FeedForward::experts)
            })
        })
        .collect::<Result<_, _>>()?;
    Decoder::load(weights, config, layers)
}
