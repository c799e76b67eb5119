//! ERNIE 4.5 mixtures of experts (ERNIE-4.5-21B-A3B, 300B-A47B; mlx-lm's `ernie4_5_moe.py`):
//! Llama's layers with biases by `use_bias` and a rotation of adjacent pairs; every
//! `moe_layer_interval`-th layer from `moe_layer_start_index` to `moe_layer_end_index` routes each
//! position to `moe_k` of `moe_num_experts` experts by softmax plus a correction bias (the
//! router's `moe_statics`), beside `moe_num_shared_experts` shared experts.

use crate::model::blocks::attention::AttentionSpec;
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing, unfuse_experts};
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    let experts: i32 = config.key_named_or(&["moe_num_experts", "num_experts"], 64)?;
    Ok(Some(MoeSpec::new(
        experts,
        config.key_named_or(&["moe_k", "num_experts_per_tok"], 6)?,
        config.key_or("moe_intermediate_size", 1536)?,
        Routing::SoftmaxBiasedTopK {
            min_total: config.key_or("moe_norm_min", 1e-12)?,
        },
    )))
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let interleaved = ModelConfig {
        rope_traditional: true,
        ..config.clone()
    };
    let rope = Rope::for_config(&interleaved, weights)?;
    let bias: bool = config.key_or("use_bias", false)?;
    let moe = experts(config)?;
    let shared: i32 = config.key_or("moe_num_shared_experts", 2)?;
    let interval: i32 = config.key_or("moe_layer_interval", 1)?;
    let start: i32 = config.key_or("moe_layer_start_index", 1)?;
    let end = match config.key_or("moe_layer_end_index", -1)? {
        -1 => config.num_layers - 1,
        end => end,
    };
    let layers = (0..config.num_layers)
        .map(|index| {
            let attention = AttentionSpec {
                qkv_bias: bias,
                o_bias: bias,
                ..AttentionSpec::new(config, rope.clone())
            };
            let sparse =
                interval > 0 && (index + 1) % interval == 0 && (start..=end).contains(&index);
            DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
                let mlp = format!("{prefix}.mlp");
                let Some(moe) = moe.clone().filter(|_| sparse) else {
                    return Mlp::load(weights, config, &mlp, config.intermediate_size()?, bias)
                        .map(FeedForward::Dense);
                };
                let inner = moe.inner;
                // The correction bias lives beside the router, one row per expert group (one).
                weights.convert(
                    &format!("{mlp}.moe_statics.e_score_correction_bias"),
                    &format!("{mlp}.gate.e_score_correction_bias"),
                    "flattening the router's correction bias",
                    |bias| bias.flatten(None, None),
                )?;
                unfuse_experts(weights, &mlp)?;
                let names = ExpertNames::swiglu_under(&mlp);
                let mut experts = Moe::load(weights, config, &format!("{mlp}.gate"), names, moe)?;
                if shared > 0 {
                    let prefix = format!("{mlp}.shared_experts");
                    let shared = Mlp::load(weights, config, &prefix, inner * shared, bias)?;
                    experts = experts.with_shared_experts(shared);
                }
                Ok(FeedForward::experts(experts))
            })
        })
        .collect::<Result<_, _>>()?;
    Decoder::load(weights, config, layers)
}
