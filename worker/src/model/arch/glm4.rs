//! GLM-4 (GLM-4-9B-0414, GLM-4-32B-0414; mlx-lm's `glm4.py`): q/k/v biases, a rotation of the
//! first `partial_rotary_factor` of each head in adjacent pairs, the MLP's gate and up fused in
//! `gate_up_proj` (split at load), and each block's output normalized before its residual sum
//! (`post_self_attn_layernorm`, `post_mlp_layernorm`) besides the usual pre-norms.

use serde::Deserialize;

use crate::model::blocks::attention::{Attention, AttentionSpec};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward, SandwichNorms};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::norm::Norm;
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// GLM-4's own keys, defaulting as transformers' `Glm4Config` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    attention_bias: bool,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            attention_bias: true,
        }
    }
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
    let partial: f64 = config.rope_key_or("partial_rotary_factor", 0.5)?;
    let rope = Rope::partial_for_config(config, weights, partial, true)?;
    let qkv_bias = config.args::<Args>()?.attention_bias;
    let layers = (0..config.num_layers)
        .map(|index| {
            let prefix = format!("model.layers.{index}");
            let norm = |weights: &mut Weights, name: &str| {
                Norm::rms(weights, &format!("{prefix}.{name}.weight"), hidden, eps)
            };
            let attention = AttentionSpec {
                qkv_bias,
                ..AttentionSpec::new(config, rope.clone())
            };
            let attention =
                Attention::load(weights, config, &format!("{prefix}.self_attn"), attention)?;
            let mlp = Mlp::load_fused(
                weights,
                config,
                &format!("{prefix}.mlp"),
                config.intermediate_size()?,
            )?;
            let norms = SandwichNorms {
                input: norm(weights, "input_layernorm")?,
                post_attention: norm(weights, "post_self_attn_layernorm")?,
                pre_feed_forward: norm(weights, "post_attention_layernorm")?,
                post_feed_forward: norm(weights, "post_mlp_layernorm")?,
            };
            Ok(DecoderLayer::sandwich(
                norms,
                attention.into(),
                FeedForward::dense(mlp),
            ))
        })
        .collect::<Result<_, ModelError>>()?;
    let norm = Norm::rms(weights, "model.norm.weight", hidden, eps)?;
    let tied = !weights.contains("lm_head.weight");
    Decoder::load_around(weights, config, layers, norm, tied)
}
