//! MiniMax-M2 (mlx-lm's `minimax.py`): attention whose queries and keys are each RMS-normalized
//! over all their heads together, a rotation of the first `partial_rotary_factor` (older
//! configs: `rotary_dim`) of each head; every layer routes each position to
//! `num_experts_per_tok` of `num_local_experts` experts chosen by sigmoid score plus the block's
//! `e_score_correction_bias`, weighted by their renormalized scores. The experts are named as
//! Mixtral's (`block_sparse_moe.experts.{e}.w1`...).

use serde::Deserialize;

use super::mixtral::expert_names;
use crate::model::blocks::attention::{AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::moe::{Moe, MoeSpec, Routing};
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// MiniMax-M2's own keys, defaulting as transformers' `MiniMaxM2Config` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    /// 256 without either spelling (the class's `attribute_map` reads `num_experts` as it);
    /// `num_local_experts` first where a config has both.
    num_local_experts: Option<i32>,
    num_experts: Option<i32>,
    num_experts_per_tok: i32,
    /// The released checkpoints' spelling of the rotated part, before `partial_rotary_factor`.
    rotary_dim: Option<f64>,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            num_local_experts: None,
            num_experts: None,
            num_experts_per_tok: 8,
            rotary_dim: None,
        }
    }
}

pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    moe(config, &config.args()?).map(Some)
}

fn moe(config: &ModelConfig, args: &Args) -> Result<MoeSpec, ModelError> {
    Ok(MoeSpec::new(
        args.num_local_experts.or(args.num_experts).unwrap_or(256),
        args.num_experts_per_tok,
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
    let args: Args = config.args()?;
    let partial = match args.rotary_dim {
        Some(dims) => dims / f64::from(config.head_dim),
        None => config.rope_key_or("partial_rotary_factor", 1.0)?,
    };
    let rope = Rope::partial_for_config(config, weights, partial, false)?;
    let moe = moe(config, &args)?;
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
