//! Nemotron-H (mlx-lm's `nemotron_h.py`): NVIDIA's hybrid whose layers each hold one block
//! after a norm, `x + block(norm(x))`: a Mamba-2 mixer (`M`), attention without positional
//! encoding (`*`), an ungated squared-ReLU MLP (`-`) or Nemotron 3's experts (`E`: squared-ReLU
//! experts chosen by sigmoid score plus a correction bias within the best groups, scaled, beside
//! a shared squared-ReLU expert), as `hybrid_override_pattern` spells them (transformers 5's
//! `layers_block_type`: `linear_attention`, `full_attention`, `mlp`, `moe`).
//!
//! A mixer followed by an MLP or experts is one pre-norm decoder layer, the feed-forward block's
//! norm its second; a mixer followed by another mixer is a layer without a feed-forward block.
//! Checkpoints name the stack `backbone.embeddings`, `backbone.layers.{i}.norm` / `.mixer` and
//! `backbone.norm_f`; expert `e`'s projections `mixer.experts.{e}.up_proj` / `down_proj`
//! (mlx-community's stacked `switch_mlp.fc1` / `fc2`). Experts through a latent projection
//! (`moe_latent_size`) are refused.

use serde::Deserialize;

use crate::model::blocks::attention::{Attention, AttentionSpec};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward, Mixer};
use crate::model::blocks::mamba2::{Mamba2, Mamba2Spec};
use crate::model::blocks::mlp::{Activation, Mlp};
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing};
use crate::model::blocks::norm::Norm;
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::{CacheShape, LayerCache};
use crate::model::weights::Weights;

/// Nemotron-H's own keys, defaulting as transformers' `NemotronHConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    /// The release's layer pattern (`M-M*-`); transformers 5 writes `layers_block_type`, and
    /// mlx-lm also reads `layer_types`. No one defaults the layer list.
    hybrid_override_pattern: Option<String>,
    layers_block_type: Option<Vec<String>>,
    layer_types: Option<Vec<String>>,
    mamba_num_heads: i32,
    mamba_head_dim: i32,
    ssm_state_size: i32,
    n_groups: i32,
    conv_kernel: i32,
    use_conv_bias: bool,
    mamba_proj_bias: bool,
    time_step_min: f32,
    mlp_bias: bool,
    attention_bias: bool,
    n_routed_experts: i32,
    num_experts_per_tok: i32,
    moe_intermediate_size: i32,
    n_shared_experts: i32,
    moe_shared_expert_intermediate_size: i32,
    moe_latent_size: Option<i32>,
    n_group: i32,
    topk_group: i32,
    norm_topk_prob: bool,
    routed_scaling_factor: f32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            hybrid_override_pattern: None,
            layers_block_type: None,
            layer_types: None,
            mamba_num_heads: 128,
            mamba_head_dim: 64,
            ssm_state_size: 128,
            n_groups: 8,
            conv_kernel: 4,
            use_conv_bias: true,
            mamba_proj_bias: false,
            time_step_min: 0.001,
            mlp_bias: false,
            attention_bias: false,
            n_routed_experts: 8,
            num_experts_per_tok: 2,
            moe_intermediate_size: 7688,
            n_shared_experts: 1,
            moe_shared_expert_intermediate_size: 7688,
            moe_latent_size: None,
            n_group: 1,
            topk_group: 1,
            norm_topk_prob: true,
            routed_scaling_factor: 1.0,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Block {
    Mamba,
    Attention,
    Mlp,
    Experts,
}

/// The routed experts of the `E` layers; `None` without any.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    experts_of(config, &config.args()?)
}

fn experts_of(config: &ModelConfig, args: &Args) -> Result<Option<MoeSpec>, ModelError> {
    if !blocks(config, args)?.contains(&Block::Experts) {
        return Ok(None);
    }
    if args.moe_latent_size.is_some_and(|size| size > 0) {
        return Err(ModelError::Config {
            path: config.path.clone(),
            message: "Nemotron-H's experts through a latent projection (moe_latent_size) are not \
                      served yet"
                .into(),
        });
    }
    let routing = Routing::GroupedSigmoid {
        groups: args.n_group,
        top_groups: args.topk_group,
        normalize: args.norm_topk_prob,
        scaling: args.routed_scaling_factor,
    };
    Ok(Some(MoeSpec {
        activation: Activation::SquaredRelu,
        ..MoeSpec::new(
            args.n_routed_experts,
            args.num_experts_per_tok,
            args.moe_intermediate_size,
            routing,
        )
    }))
}

/// One cache per decoder layer, that is per mixer block: a Mamba-2 layer's state, an attention
/// layer's keys and values.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    let args = config.args()?;
    let state = mamba_spec(config, &args)?.state_shape();
    Ok(blocks(config, &args)?
        .into_iter()
        .filter_map(|block| match block {
            Block::Mamba => Some(LayerCache::State(state)),
            Block::Attention => Some(LayerCache::Positions {
                shape: CacheShape::heads(config.num_kv_heads, config.head_dim),
                window: None,
            }),
            Block::Mlp | Block::Experts => None,
        })
        .collect())
}

fn mamba_spec(config: &ModelConfig, args: &Args) -> Result<Mamba2Spec, ModelError> {
    Mamba2Spec {
        heads: args.mamba_num_heads,
        head_dim: args.mamba_head_dim,
        state_size: args.ssm_state_size,
        groups: args.n_groups,
        conv_kernel: args.conv_kernel,
        conv_bias: args.use_conv_bias,
        proj_bias: args.mamba_proj_bias,
        // transformers' mixer clamps the time step from below at `time_step_min`, whatever
        // `time_step_limit` says (mlx-lm reads that, (0, inf) here, and departs where softplus
        // gives less).
        time_step_limit: (args.time_step_min, f32::INFINITY),
        eps: config.rms_norm_eps,
    }
    .checked(config)
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let blocks = blocks(config, &args)?;
    let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
    let spec = mamba_spec(config, &args)?;
    let (mlp_bias, attention_bias) = (args.mlp_bias, args.attention_bias);
    let moe = experts_of(config, &args)?;
    // Attention is NoPE; the spec's constructor wants a rotation it then goes without.
    let rope = Rope::new(config.head_dim, config.rope_theta, false, None)
        .map_err(|source| weights.mlx_error("building rotary frequencies", source))?;
    weights.rename_layer("backbone.embeddings", "model.embed_tokens");
    let norm = |weights: &mut Weights, index: usize| {
        Norm::rms(
            weights,
            &format!("backbone.layers.{index}.norm.weight"),
            hidden,
            eps,
        )
    };
    let mut layers = Vec::new();
    let mut index = 0;
    while index < blocks.len() {
        let prefix = format!("backbone.layers.{index}.mixer");
        let mixer = match blocks[index] {
            Block::Mamba => Mixer::Mamba2(Box::new(Mamba2::load(weights, config, &prefix, spec)?)),
            Block::Attention => {
                let attention = AttentionSpec {
                    qkv_bias: attention_bias,
                    o_bias: attention_bias,
                    rope: None,
                    ..AttentionSpec::new(config, rope.clone())
                };
                Attention::load(weights, config, &prefix, attention)?.into()
            }
            Block::Mlp | Block::Experts => {
                return Err(ModelError::Config {
                    path: config.path.clone(),
                    message: format!(
                        "layer {index} is a feed-forward block that follows no Mamba-2 or \
                         attention layer"
                    ),
                });
            }
        };
        let input_norm = norm(weights, index)?;
        let block = format!("backbone.layers.{}.mixer", index + 1);
        let feed_forward = match blocks.get(index + 1) {
            Some(Block::Mlp) => FeedForward::dense(Mlp::load_squared_relu(
                weights,
                config,
                &block,
                config.intermediate_size()?,
                mlp_bias,
            )?),
            Some(Block::Experts) => {
                let spec = moe.clone().ok_or_else(|| ModelError::Config {
                    path: config.path.clone(),
                    message: "experts without their sizes".into(),
                })?;
                FeedForward::experts(nemotron_experts(weights, config, &args, &block, spec)?)
            }
            _ => FeedForward::Absent,
        };
        let pre_feed_forward_norm = match feed_forward {
            FeedForward::Absent => Norm::Identity,
            _ => norm(weights, index + 1)?,
        };
        index += if matches!(feed_forward, FeedForward::Absent) {
            1
        } else {
            2
        };
        layers.push(DecoderLayer {
            input_norm,
            mixer,
            post_attention_norm: None,
            pre_feed_forward_norm,
            feed_forward,
            post_feed_forward_norm: None,
            residual_scale: None,
            per_layer_gate: None,
            output_scale: None,
        });
    }
    let final_norm = Norm::rms(weights, "backbone.norm_f.weight", hidden, eps)?;
    let tied = config
        .tie_word_embeddings
        .unwrap_or(!weights.contains("lm_head.weight"));
    Decoder::load_around(weights, config, layers, final_norm, tied)
}

/// The experts under `block`: the router `gate` with its correction bias, squared-ReLU
/// experts, and the shared expert `shared_experts` where `n_shared_experts` has one.
fn nemotron_experts(
    weights: &mut Weights,
    config: &ModelConfig,
    args: &Args,
    block: &str,
    spec: MoeSpec,
) -> Result<Moe, ModelError> {
    let names = [
        ("gate_proj", "gate_proj"),
        ("fc1", "up_proj"),
        ("fc2", "down_proj"),
    ]
    .map(|(stacked, original)| {
        let experts = format!("{block}.experts");
        ExpertNames {
            stacked: format!("{block}.switch_mlp.{stacked}"),
            per_expert: Some(Box::new(move |expert| {
                format!("{experts}.{expert}.{original}")
            })),
        }
    });
    let moe = Moe::load(weights, config, &format!("{block}.gate"), names, spec)?;
    if args.n_shared_experts == 0 {
        return Ok(moe);
    }
    let shared = Mlp::load_squared_relu(
        weights,
        config,
        &format!("{block}.shared_experts"),
        args.moe_shared_expert_intermediate_size,
        args.mlp_bias,
    )?;
    Ok(moe.with_shared_experts(shared))
}

/// Each layer's block, from `hybrid_override_pattern` or else `layers_block_type` /
/// `layer_types` (with the legacy names mlx-lm also reads).
fn blocks(config: &ModelConfig, args: &Args) -> Result<Vec<Block>, ModelError> {
    let bad = |message: String| ModelError::Config {
        path: config.path.clone(),
        message,
    };
    let names: Vec<String> = match (
        &args.hybrid_override_pattern,
        &args.layers_block_type,
        &args.layer_types,
    ) {
        (Some(pattern), _, _) => pattern.chars().map(String::from).collect(),
        (None, Some(types), _) | (None, None, Some(types)) => types.clone(),
        (None, None, None) => {
            return Err(bad(
                "nemotron_h needs hybrid_override_pattern or layers_block_type".into(),
            ));
        }
    };
    let blocks = names
        .iter()
        .map(|name| match name.as_str() {
            "M" | "mamba" | "linear_attention" => Ok(Block::Mamba),
            "*" | "attention" | "full_attention" => Ok(Block::Attention),
            "-" | "mlp" => Ok(Block::Mlp),
            "E" | "moe" => Ok(Block::Experts),
            other => Err(bad(format!("unknown Nemotron-H layer kind {other:?}"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if blocks.len() != config.num_layers as usize {
        return Err(bad(format!(
            "the layer pattern names {} layers, num_hidden_layers is {}",
            blocks.len(),
            config.num_layers
        )));
    }
    Ok(blocks)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    #[test]
    fn the_release_pattern_and_transformers_5_list_read_alike() {
        let read = |layers: serde_json::Value| {
            let mut config = json!({
                "model_type": "nemotron_h", "hidden_size": 64, "intermediate_size": 64,
                "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 128,
                "layer_norm_epsilon": 1e-5,
            });
            for (key, value) in layers.as_object().unwrap() {
                config[key] = value.clone();
            }
            let config = ModelConfig::from_json(config, Path::new("config.json")).unwrap();
            (
                config.num_layers,
                blocks(&config, &config.args().unwrap()).unwrap(),
            )
        };
        let pattern = read(json!({"hybrid_override_pattern": "M-M*-"}));
        let listed = read(json!({"layers_block_type":
            ["linear_attention", "mlp", "mamba", "full_attention", "mlp"]}));
        assert_eq!(pattern, listed);
        assert_eq!(
            pattern.1,
            [
                Block::Mamba,
                Block::Mlp,
                Block::Mamba,
                Block::Attention,
                Block::Mlp
            ]
        );
    }
}
