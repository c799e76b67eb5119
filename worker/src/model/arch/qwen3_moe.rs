//! Qwen3-MoE: Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder (mlx-lm's `qwen3_moe.py`). Qwen3's
//! attention; every `decoder_sparse_step`-th layer not in `mlp_only_layers` routes each position
//! to `num_experts_per_tok` of `num_experts` experts (softmax, then top k).

use serde::Deserialize;

use crate::model::blocks::attention::{AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing, unfuse_experts};
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// Qwen3-MoE's own keys, defaulting as transformers' `Qwen3MoeConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    /// 128 without either spelling (transformers 5 writes `num_local_experts`); `num_experts`
    /// first where a config has both.
    num_experts: Option<i32>,
    num_local_experts: Option<i32>,
    num_experts_per_tok: i32,
    moe_intermediate_size: i32,
    norm_topk_prob: bool,
    decoder_sparse_step: i32,
    /// None: no layer kept dense.
    mlp_only_layers: Option<Vec<i32>>,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            num_experts: None,
            num_local_experts: None,
            num_experts_per_tok: 8,
            moe_intermediate_size: 768,
            norm_topk_prob: false,
            decoder_sparse_step: 1,
            mlp_only_layers: None,
        }
    }
}

/// The routed experts, `None` when `num_experts` is 0 (every layer dense).
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    Ok(experts_of(&config.args()?))
}

fn experts_of(args: &Args) -> Option<MoeSpec> {
    let spec = MoeSpec::new(
        args.num_experts.or(args.num_local_experts).unwrap_or(128),
        args.num_experts_per_tok,
        args.moe_intermediate_size,
        Routing::SoftmaxTopK {
            normalize: args.norm_topk_prob,
        },
    );
    (spec.experts > 0).then_some(spec)
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let rope = Rope::for_config(config, weights)?;
    let moe = experts_of(&args);
    let sparse_step = args.decoder_sparse_step;
    let dense_layers = args.mlp_only_layers.unwrap_or_default();
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
                        .map(FeedForward::dense);
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
