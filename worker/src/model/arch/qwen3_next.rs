//! Qwen3-Next (mlx-lm's `qwen3_next.py`): of every `full_attention_interval` layers, the last is
//! attention and the others gated DeltaNet (linear attention with a recurrent state). The
//! attention rotates a `partial_rotary_factor` of each head, normalizes queries and keys, and
//! gates its output by the sigmoid of a second half of `q_proj`; the sparse layers route as
//! Qwen3-MoE and add a shared expert scaled by the sigmoid of `shared_expert_gate`.
//!
//! The original checkpoints store the decoder's norms as their offset from one and conv1d as
//! `[channels, 1, kernel]`; mlx-lm's `sanitize` converts both where it finds the latter, and so
//! does [`hybrid`]. Their multi-token-prediction layer (`mtp.*`, which mlx-lm drops) is a full
//! attention layer of the model's kind behind the MTP norms and projection ([`MtpLayer`]).

use serde::Deserialize;

use crate::model::blocks::attention::{Attention, AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward, Mixer};
use crate::model::blocks::gated_delta::{DeltaSpec, GatedDeltaNet};
use crate::model::blocks::linear::Linear;
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing, unfuse_experts};
use crate::model::blocks::mtp::{MtpLayer, MtpNames};
use crate::model::blocks::norm::Norm;
use crate::model::blocks::rope::Rope;
use crate::model::config::{ModelConfig, RopeScaling};
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::{CacheShape, LayerCache};
use crate::model::weights::Weights;

/// Qwen3-Next's own keys, defaulting as transformers' `Qwen3NextConfig` does; the keys its layers
/// share with Qwen3.5 are [`HybridArgs`].
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    /// 512 without either spelling; `num_experts` first where a config has both.
    num_experts: Option<i32>,
    num_local_experts: Option<i32>,
    num_experts_per_tok: i32,
    moe_intermediate_size: i32,
    /// 512, transformers' default (corral had 0; mlx-lm has none).
    shared_expert_intermediate_size: i32,
    /// true, transformers' default, in `build` too (which had mlx-lm's false).
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
            num_experts_per_tok: 10,
            moe_intermediate_size: 512,
            shared_expert_intermediate_size: 512,
            norm_topk_prob: true,
            decoder_sparse_step: 1,
            mlp_only_layers: None,
        }
    }
}

impl Args {
    fn moe(&self) -> MoeSpec {
        MoeSpec::new(
            self.num_experts.or(self.num_local_experts).unwrap_or(512),
            self.num_experts_per_tok,
            self.moe_intermediate_size,
            Routing::SoftmaxTopK {
                normalize: self.norm_topk_prob,
            },
        )
    }
}

/// The keys of the layers Qwen3-Next and Qwen3.5 share, defaulting as transformers'
/// `Qwen3NextConfig`, `Qwen3_5TextConfig` and `Qwen3_5MoeTextConfig` all do
/// (`full_attention_interval` is the argument their constructors derive `layer_types` from).
#[derive(Deserialize)]
#[serde(default)]
struct HybridArgs {
    full_attention_interval: i32,
    attention_bias: bool,
}

impl Default for HybridArgs {
    fn default() -> Self {
        Self {
            full_attention_interval: 4,
            attention_bias: false,
        }
    }
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let rope = partial_rope(
        config,
        weights,
        config.rope_key_or("partial_rotary_factor", 0.25)?,
        config.rope_theta,
        config.rope_scaling.clone(),
    )?;
    let moe = args.moe();
    let step = args.decoder_sparse_step;
    let dense_layers = args.mlp_only_layers.unwrap_or_default();
    let sparse = (0..config.num_layers)
        .map(|index| {
            moe.experts > 0 && step > 0 && !dense_layers.contains(&index) && (index + 1) % step == 0
        })
        .collect();
    hybrid(
        config,
        weights,
        rope,
        sparse,
        moe,
        args.shared_expert_intermediate_size,
    )
}

/// The routed experts of a Qwen3-Next config (`None` for a dense one).
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    let spec = config.args::<Args>()?.moe();
    Ok((spec.experts > 0).then_some(spec))
}

/// A rotation of the first `factor` of each head's channels.
pub(super) fn partial_rope(
    config: &ModelConfig,
    weights: &Weights,
    factor: f32,
    base: f32,
    scaling: Option<RopeScaling>,
) -> Result<Rope, ModelError> {
    let dims = (config.head_dim as f32 * factor) as i32;
    Rope::new(dims, base, false, scaling)
        .map_err(|source| weights.mlx_error("building rotary frequencies", source))
}

/// Which layers are gated DeltaNet: `layer_types`, else all but every
/// `full_attention_interval`-th.
fn linear_layers(config: &ModelConfig) -> Result<Vec<bool>, ModelError> {
    let interval = config.args::<HybridArgs>()?.full_attention_interval;
    let layer_types = config.layer_types()?;
    Ok((0..config.num_layers)
        .map(|index| match &layer_types {
            Some(kinds) => kinds[index as usize] == "linear_attention",
            None => (index + 1) % interval != 0,
        })
        .collect())
}

/// What each layer of Qwen3-Next and Qwen3.5 keeps for a sequence: an attention layer its
/// keys and values, a gated DeltaNet its state.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    let linear = linear_layers(config)?;
    let state = if linear.contains(&true) {
        Some(DeltaSpec::for_config(config)?.state_shape())
    } else {
        None
    };
    Ok(linear
        .into_iter()
        .map(|linear| match state.filter(|_| linear) {
            Some(state) => LayerCache::State(state),
            None => LayerCache::Positions {
                shape: CacheShape::heads(config.num_kv_heads, config.head_dim),
                window: None,
            },
        })
        .collect())
}

/// The layers Qwen3-Next and Qwen3.5 share: `sparse[i]` says whether layer `i` routes to
/// the experts `moe`, beside a gated shared expert `shared_inner` wide.
pub(super) fn hybrid(
    config: &ModelConfig,
    weights: &mut Weights,
    rope: Rope,
    sparse: Vec<bool>,
    moe: MoeSpec,
    shared_inner: i32,
) -> Result<Decoder, ModelError> {
    let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
    let linear = linear_layers(config)?;
    let is_linear = |index: i32| linear[index as usize];
    let delta = DeltaSpec::for_config(config)?;
    let original = (0..config.num_layers)
        .filter(|&index| is_linear(index))
        .any(|index| {
            let conv = format!("model.layers.{index}.linear_attn.conv1d.weight");
            weights
                .shape_of(&conv)
                .is_some_and(|shape| shape.last() != Some(&1))
        });
    let norm = |weights: &mut Weights, name: &str| {
        if original {
            Norm::rms_offset(weights, name, hidden, eps)
        } else {
            Norm::rms(weights, name, hidden, eps)
        }
    };
    let head_norm = if original {
        HeadNorm::RmsOffset { eps }
    } else {
        HeadNorm::Rms { eps }
    };
    let bias = config.args::<HybridArgs>()?.attention_bias;
    let load_layer = |weights: &mut Weights, prefix: &str, linear: bool, sparse: bool| {
        let mixer = if linear {
            let prefix = format!("{prefix}.linear_attn");
            Mixer::GatedDelta(Box::new(GatedDeltaNet::load(
                weights, config, &prefix, delta,
            )?))
        } else {
            let attention = AttentionSpec {
                qkv_bias: bias,
                o_bias: bias,
                head_norm: Some(head_norm),
                output_gate: true,
                ..AttentionSpec::new(config, rope.clone())
            };
            Attention::load(weights, config, &format!("{prefix}.self_attn"), attention)?.into()
        };
        let mlp = format!("{prefix}.mlp");
        let feed_forward = if sparse {
            unfuse_experts(weights, &mlp)?;
            let names = ExpertNames::swiglu_under(&mlp);
            let experts = Moe::load(weights, config, &format!("{mlp}.gate"), names, moe.clone())?;
            let shared = Mlp::load(
                weights,
                config,
                &format!("{mlp}.shared_expert"),
                shared_inner,
                false,
            )?;
            let gate = Linear::load(
                weights,
                &format!("{mlp}.shared_expert_gate"),
                1,
                hidden,
                false,
                config.quantization,
            )?;
            FeedForward::experts(experts.with_gated_shared_expert(shared, gate))
        } else {
            FeedForward::dense(Mlp::load(
                weights,
                config,
                &mlp,
                config.intermediate_size()?,
                false,
            )?)
        };
        Ok(DecoderLayer {
            input_norm: norm(weights, &format!("{prefix}.input_layernorm.weight"))?,
            mixer,
            post_attention_norm: None,
            pre_feed_forward_norm: norm(
                weights,
                &format!("{prefix}.post_attention_layernorm.weight"),
            )?,
            feed_forward,
            post_feed_forward_norm: None,
            residual_scale: None,
            per_layer_gate: None,
            output_scale: None,
        })
    };
    let layers = (0..config.num_layers)
        .map(|index| {
            let prefix = format!("model.layers.{index}");
            load_layer(weights, &prefix, is_linear(index), sparse[index as usize])
        })
        .collect::<Result<_, ModelError>>()?;
    // The release's one multi-token-prediction layer attends in full, with experts where the
    // model has them.
    let mtp = if weights.contains("mtp.fc.weight") {
        let block = load_layer(weights, "mtp.layers.0", false, sparse.contains(&true))?;
        Some(MtpLayer::load(
            weights,
            config,
            &MtpNames::qwen(),
            block,
            norm,
        )?)
    } else {
        None
    };
    weights.discard_under("mtp.");
    let final_norm = norm(weights, "model.norm.weight")?;
    let tied = config.tie_word_embeddings.unwrap_or(false);
    Ok(Decoder::load_around(weights, config, layers, final_norm, tied)?.with_mtp(mtp))
}
