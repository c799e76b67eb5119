//! ERNIE 4.5 mixtures of experts (ERNIE-4.5-21B-A3B, 300B-A47B; mlx-lm's `ernie4_5_moe.py`):
//! Llama's layers with biases by `use_bias` and a rotation of adjacent pairs; every
//! `moe_layer_interval`-th layer from `moe_layer_start_index` to `moe_layer_end_index` routes each
//! position to `moe_k` of `moe_num_experts` experts by softmax plus a correction bias (the
//! router's `moe_statics`), beside `moe_num_shared_experts` shared experts.

use serde::Deserialize;

use crate::model::blocks::attention::AttentionSpec;
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing, unfuse_experts};
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// ERNIE 4.5's own keys, defaulting as transformers' `Ernie4_5_MoeConfig` does (its
/// `attribute_map` reads `num_experts` and `num_experts_per_tok` as `moe_num_experts` and
/// `moe_k`; the `moe_` spelling first where a config has both).
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    /// 64 without either spelling.
    moe_num_experts: Option<i32>,
    num_experts: Option<i32>,
    /// 6 without either spelling.
    moe_k: Option<i32>,
    num_experts_per_tok: Option<i32>,
    moe_intermediate_size: i32,
    moe_norm_min: f32,
    use_bias: bool,
    moe_num_shared_experts: i32,
    moe_layer_interval: i32,
    moe_layer_start_index: i32,
    /// -1: the last layer.
    moe_layer_end_index: i32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            moe_num_experts: None,
            num_experts: None,
            moe_k: None,
            num_experts_per_tok: None,
            moe_intermediate_size: 1536,
            moe_norm_min: 1e-12,
            use_bias: false,
            moe_num_shared_experts: 2,
            moe_layer_interval: 1,
            moe_layer_start_index: 1,
            moe_layer_end_index: -1,
        }
    }
}

pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    Ok(Some(moe(&config.args()?)))
}

fn moe(args: &Args) -> MoeSpec {
    MoeSpec::new(
        args.moe_num_experts.or(args.num_experts).unwrap_or(64),
        args.moe_k.or(args.num_experts_per_tok).unwrap_or(6),
        args.moe_intermediate_size,
        Routing::SoftmaxBiasedTopK {
            min_total: args.moe_norm_min,
        },
    )
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let interleaved = ModelConfig {
        rope_traditional: true,
        ..config.clone()
    };
    let rope = Rope::for_config(&interleaved, weights)?;
    let args: Args = config.args()?;
    let bias = args.use_bias;
    let moe = Some(moe(&args));
    let shared = args.moe_num_shared_experts;
    let interval = args.moe_layer_interval;
    let start = args.moe_layer_start_index;
    let end = match args.moe_layer_end_index {
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
                        .map(FeedForward::dense);
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
