//! Mixtral 8x7B and 8x22B (mlx-lm's `mixtral.py`): Mistral's attention; every layer routes each
//! position to `num_experts_per_tok` of `num_local_experts` experts (top k, then softmax). The
//! original checkpoints name expert `e`'s projections `block_sparse_moe.experts.{e}.w1` (gate),
//! `w3` (up) and `w2` (down).

use serde::Deserialize;

use crate::model::blocks::attention::AttentionSpec;
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing};
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// Mixtral's own keys, defaulting as transformers' `MixtralConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    num_local_experts: i32,
    num_experts_per_tok: i32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            num_local_experts: 8,
            num_experts_per_tok: 2,
        }
    }
}

/// Every layer's routed experts.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    moe(config).map(Some)
}

fn moe(config: &ModelConfig) -> Result<MoeSpec, ModelError> {
    let args: Args = config.args()?;
    Ok(MoeSpec::new(
        args.num_local_experts,
        args.num_experts_per_tok,
        config.intermediate_size()?,
        Routing::TopKSoftmax,
    ))
}

/// The experts under `block` as Mixtral's checkpoints name them (`experts.{e}.w1`, `w3`, `w2`),
/// or stacked under `switch_mlp` as mlx-community writes them.
pub(super) fn expert_names(block: &str) -> [ExpertNames; 3] {
    [("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")].map(|(name, original)| {
        let experts = format!("{block}.experts");
        ExpertNames {
            stacked: format!("{block}.switch_mlp.{name}"),
            per_expert: Some(Box::new(move |expert| {
                format!("{experts}.{expert}.{original}")
            })),
        }
    })
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let rope = Rope::for_config(config, weights)?;
    let moe = moe(config)?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let attention = AttentionSpec::new(config, rope.clone());
            DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
                let block = format!("{prefix}.block_sparse_moe");
                let names = expert_names(&block);
                Moe::load(
                    weights,
                    config,
                    &format!("{block}.gate"),
                    names,
                    moe.clone(),
                )
                .map(FeedForward::experts)
            })
        })
        .collect::<Result<_, _>>()?;
    Decoder::load(weights, config, layers)
}
