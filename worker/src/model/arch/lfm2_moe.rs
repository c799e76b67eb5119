//! LFM2-MoE (mlx-lm's `lfm2_moe.py`): LFM2's layers, the first `num_dense_layers` with an MLP
//! `intermediate_size` wide, the others routing each position by sigmoid score (plus
//! `expert_bias` to choose, when `use_expert_bias`) to `num_experts_per_tok` of `num_experts`
//! experts.
//!
//! The original checkpoints name the projections `w1`, `w3`, `w2` and store one tensor per
//! expert (`feed_forward.experts.{e}.w1`); mlx-community's are renamed and stacked
//! (`feed_forward.switch_mlp.gate_proj`). Both load.

use serde::Deserialize;

use super::lfm2::{hybrid, rename_feed_forward};
use crate::model::blocks::decoder_layer::FeedForward;
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing};
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// LFM2-MoE's own keys, defaulting as transformers' `Lfm2MoeConfig` does (the layers' own are
/// read with LFM2's).
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    num_experts: i32,
    num_experts_per_tok: i32,
    moe_intermediate_size: i32,
    use_expert_bias: bool,
    norm_topk_prob: bool,
    routed_scaling_factor: f32,
    num_dense_layers: i32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            num_experts: 32,
            num_experts_per_tok: 4,
            moe_intermediate_size: 1792,
            use_expert_bias: true,
            norm_topk_prob: true,
            routed_scaling_factor: 1.0,
            num_dense_layers: 2,
        }
    }
}

/// The routed experts of the layers past `num_dense_layers`.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    Ok(Some(moe(&config.args()?)))
}

fn moe(args: &Args) -> MoeSpec {
    MoeSpec::new(
        args.num_experts,
        args.num_experts_per_tok,
        args.moe_intermediate_size,
        Routing::SigmoidTopK {
            biased: args.use_expert_bias,
            normalize: args.norm_topk_prob,
            scaling: args.routed_scaling_factor,
        },
    )
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let dense_layers = args.num_dense_layers;
    let spec = moe(&args);
    hybrid(config, weights, |weights, index, prefix| {
        let mlp = format!("{prefix}.feed_forward");
        if index < dense_layers {
            rename_feed_forward(weights, &mlp);
            return Ok(FeedForward::dense(Mlp::load(
                weights,
                config,
                &mlp,
                config.intermediate_size()?,
                false,
            )?));
        }
        weights.rename(
            &format!("{mlp}.expert_bias"),
            &format!("{mlp}.gate.e_score_correction_bias"),
        );
        let names = [("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")].map(
            |(stacked, original)| {
                let experts = format!("{mlp}.experts");
                ExpertNames {
                    stacked: format!("{mlp}.switch_mlp.{stacked}"),
                    per_expert: Some(Box::new(move |expert| {
                        format!("{experts}.{expert}.{original}")
                    })),
                }
            },
        );
        let moe = Moe::load(weights, config, &format!("{mlp}.gate"), names, spec.clone())?;
        Ok(FeedForward::experts(moe))
    })
}
