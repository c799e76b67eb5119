//! gpt-oss 20b and 120b (mlx-lm's `gpt_oss.py`). Attention with biases everywhere and a learned
//! sink logit per head, alternating sliding-window and full layers (`layer_types`), YaRN; every
//! layer a mixture of experts with a biased router (top k, then softmax) and biased experts whose
//! SwiGLU is clamped. The head is never tied.
//!
//! openai's checkpoint fuses each expert's gate and up projections into `gate_up_proj` with
//! their rows interleaved, and ships the experts as MXFP4 blocks (`_blocks`, `_scales`), or
//! unquantized and input-major as transformers writes them; all are split and renamed here into
//! mlx-lm's names.

use mlx_rs::Dtype;
use serde::Deserialize;

use crate::model::blocks::attention::{Attention, AttentionSpec};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Activation;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing};
use crate::model::blocks::norm::Norm;
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::LayerCache;
use crate::model::weights::Weights;
use crate::model::window::Window;

/// gpt-oss's own keys, defaulting as transformers' `GptOssConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    num_local_experts: i32,
    num_experts_per_tok: i32,
    /// `null`: no window, the sliding layers attending over all positions as transformers'
    /// do (corral took 128).
    sliding_window: Option<i32>,
    swiglu_limit: f32,
    swiglu_alpha: f32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            num_local_experts: 128,
            num_experts_per_tok: 4,
            sliding_window: Some(128),
            swiglu_limit: 7.0,
            swiglu_alpha: 1.702,
        }
    }
}

/// Every layer's routed experts.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    moe(config, &config.args()?).map(Some)
}

fn moe(config: &ModelConfig, args: &Args) -> Result<MoeSpec, ModelError> {
    Ok(MoeSpec {
        activation: Activation::ClampedSwiglu {
            limit: args.swiglu_limit,
            alpha: args.swiglu_alpha,
        },
        biases: true,
        ..MoeSpec::new(
            args.num_local_experts,
            args.num_experts_per_tok,
            config.intermediate_size()?,
            Routing::TopKSoftmax,
        )
    })
}

/// Each layer's window: `layer_types`, else sliding and full layers alternating.
fn windows(config: &ModelConfig, args: &Args) -> Result<Vec<Option<Window>>, ModelError> {
    match args.sliding_window {
        Some(window) => super::sliding_windows(config, window, |index| index % 2 == 0),
        None => Ok(vec![None; config.num_layers as usize]),
    }
}

/// What each layer keeps for a sequence.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    super::attention_caches(config, windows(config, &config.args()?)?)
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
    let windows = windows(config, &args)?;
    let rope = Rope::for_config(config, weights)?;
    let moe = moe(config, &args)?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let prefix = format!("model.layers.{index}");
            let attention = AttentionSpec {
                qkv_bias: true,
                o_bias: true,
                sinks: true,
                window: windows[index as usize],
                ..AttentionSpec::new(config, rope.clone())
            };
            let mlp = format!("{prefix}.mlp");
            split_original_experts(weights, &format!("{mlp}.experts"))?;
            let names = ["gate_proj", "up_proj", "down_proj"].map(|name| ExpertNames {
                stacked: format!("{mlp}.experts.{name}"),
                per_expert: None,
            });
            let norm = |weights: &mut Weights, name: &str| {
                Norm::rms(weights, &format!("{prefix}.{name}.weight"), hidden, eps)
            };
            Ok(DecoderLayer {
                input_norm: norm(weights, "input_layernorm")?,
                mixer: Attention::load(weights, config, &format!("{prefix}.self_attn"), attention)?
                    .into(),
                post_attention_norm: None,
                pre_feed_forward_norm: norm(weights, "post_attention_layernorm")?,
                feed_forward: FeedForward::experts(Moe::load(
                    weights,
                    config,
                    &format!("{mlp}.router"),
                    names,
                    moe.clone(),
                )?),
                post_feed_forward_norm: None,
                residual_scale: None,
                per_layer_gate: None,
                output_scale: None,
            })
        })
        .collect::<Result<_, ModelError>>()?;
    let norm = Norm::rms(weights, "model.norm.weight", hidden, eps)?;
    Decoder::load_around(weights, config, layers, norm, false)
}

/// openai's expert tensors under `experts` as mlx-community names them: `gate_up_proj` (rows
/// interleaved gate, up, gate, ...) split into `gate_proj` and `up_proj`, MXFP4 `_blocks` (bytes
/// of `[.., groups, 16]`) as packed `.weight` words, `_scales` as `.scales`, `_bias` as `.bias`.
/// The same unquantized, as transformers writes them (a BF16 release, or `save_pretrained`):
/// `gate_up_proj` and `down_proj` without a suffix, input-major (`[experts, in, out]`).
fn split_original_experts(weights: &mut Weights, experts: &str) -> Result<(), ModelError> {
    for projection in ["gate_up_proj", "down_proj"] {
        weights.convert(
            &format!("{experts}.{projection}"),
            &format!("{experts}.{projection}.weight"),
            "transposing unquantized experts",
            |input_major| input_major.swap_axes(-1, -2),
        )?;
        let blocks = format!("{experts}.{projection}_blocks");
        let packed = format!("{experts}.{projection}.weight");
        weights.convert(&blocks, &packed, "packing MXFP4 blocks", |blocks| {
            let words = blocks.view_dtype(Dtype::Uint32)?;
            let mut shape = words.shape().to_vec();
            let last = shape.pop().unwrap_or(1);
            if let Some(groups) = shape.last_mut() {
                *groups *= last;
            }
            words.reshape(&shape)
        })?;
        weights.rename(
            &format!("{experts}.{projection}_scales"),
            &format!("{experts}.{projection}.scales"),
        );
        weights.rename(
            &format!("{experts}.{projection}_bias"),
            &format!("{experts}.{projection}.bias"),
        );
    }
    for part in ["weight", "scales"] {
        weights.deinterleave(
            &format!("{experts}.gate_up_proj.{part}"),
            1,
            [
                &format!("{experts}.gate_proj.{part}"),
                &format!("{experts}.up_proj.{part}"),
            ],
        )?;
    }
    weights.deinterleave(
        &format!("{experts}.gate_up_proj.bias"),
        1,
        [
            &format!("{experts}.gate_proj.bias"),
            &format!("{experts}.up_proj.bias"),
        ],
    )
}
