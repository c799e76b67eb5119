//! OLMo 3 (Olmo-3-7B, Olmo-3-32B; mlx-lm's `olmo3.py`): no norm before a block, only after it,
//! on its output before the residual sum; queries and keys each normalized over all their heads
//! together, before the rotation; layers `layer_types` marks `sliding_attention` attend within
//! `sliding_window`.

use serde::Deserialize;

use crate::model::blocks::attention::{Attention, AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward, SandwichNorms};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::norm::Norm;
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// OLMo 3's own key, defaulting as transformers' `Olmo3Config` does (its window and layer
/// pattern are read with Llama's, in [`super::llama::windows`]).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Args {
    attention_bias: bool,
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
    let rope = Rope::for_config(config, weights)?;
    let bias = config.args::<Args>()?.attention_bias;
    let windows = super::llama::windows(config)?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let prefix = format!("model.layers.{index}");
            let attention = AttentionSpec {
                qkv_bias: bias,
                o_bias: bias,
                head_norm: Some(HeadNorm::RmsWhole { eps }),
                window: windows[index as usize],
                ..AttentionSpec::new(config, rope.clone())
            };
            let attention =
                Attention::load(weights, config, &format!("{prefix}.self_attn"), attention)?;
            let norm = |weights: &mut Weights, name: &str| {
                Norm::rms(weights, &format!("{prefix}.{name}.weight"), hidden, eps)
            };
            let mlp = Mlp::load(
                weights,
                config,
                &format!("{prefix}.mlp"),
                config.intermediate_size()?,
                false,
            )?;
            let norms = SandwichNorms {
                input: Norm::Identity,
                post_attention: norm(weights, "post_attention_layernorm")?,
                pre_feed_forward: Norm::Identity,
                post_feed_forward: norm(weights, "post_feedforward_layernorm")?,
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
