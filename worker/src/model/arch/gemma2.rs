//! Gemma 2 (mlx-lm's `gemma2.py`, transformers' `Gemma2Model`). Every norm scales by `1 + w`;
//! each block's output is normalized before its residual sum; the MLP is GeGLU; the embedding is
//! scaled by sqrt(hidden); attention scales by `query_pre_attn_scalar^-0.5` and caps its scores
//! softly at `attn_logit_softcapping`, the logits at `final_logit_softcapping`. The layers
//! `layer_types` names sliding (every even one by default) attend within `sliding_window`, as
//! transformers does; mlx-lm attends globally in all. The head is tied unless the checkpoint has
//! `lm_head`.

use crate::model::blocks::attention::{Attention, AttentionSpec};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward, SandwichNorms};
use crate::model::blocks::mlp::{Activation, Mlp};
use crate::model::blocks::norm::Norm;
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::LayerCache;
use crate::model::weights::Weights;
use crate::model::window::Window;

/// Each layer's window: `layer_types`, else every even layer slides.
fn windows(config: &ModelConfig) -> Result<Vec<Option<Window>>, ModelError> {
    let window: i32 = config.key_or("sliding_window", 4096)?;
    let layer_types = config.layer_types()?;
    Ok((0..config.num_layers)
        .map(|index| {
            let sliding = match &layer_types {
                Some(kinds) => kinds[index as usize] == "sliding_attention",
                None => index % 2 == 0,
            };
            sliding.then_some(Window::Sliding(window))
        })
        .collect())
}

/// What each layer keeps for a sequence.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    super::attention_caches(config, windows(config)?)
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
    let windows = windows(config)?;
    let scale = config.key_or("query_pre_attn_scalar", 256.0f32)?.powf(-0.5);
    let softcap = config.key_or_null("attn_logit_softcapping", 50.0f32)?;
    let rope = Rope::for_config(config, weights)?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let prefix = format!("model.layers.{index}");
            let attention = AttentionSpec {
                scale,
                softcap,
                window: windows[index as usize],
                ..AttentionSpec::new(config, rope.clone())
            };
            let norm = |weights: &mut Weights, name: &str| {
                Norm::rms_offset(weights, &format!("{prefix}.{name}.weight"), hidden, eps)
            };
            let attention =
                Attention::load(weights, config, &format!("{prefix}.self_attn"), attention)?;
            let mlp = format!("{prefix}.mlp");
            let mlp = Mlp::load(weights, config, &mlp, config.intermediate_size()?, false)?
                .with_activation(Activation::GeluTanh);
            let norms = SandwichNorms {
                input: norm(weights, "input_layernorm")?,
                post_attention: norm(weights, "post_attention_layernorm")?,
                pre_feed_forward: norm(weights, "pre_feedforward_layernorm")?,
                post_feed_forward: norm(weights, "post_feedforward_layernorm")?,
            };
            Ok(DecoderLayer::sandwich(
                norms,
                attention.into(),
                FeedForward::Dense(mlp),
            ))
        })
        .collect::<Result<_, ModelError>>()?;
    let norm = Norm::rms_offset(weights, "model.norm.weight", hidden, eps)?;
    let tied = !weights.contains("lm_head.weight");
    let mut decoder = Decoder::load_around(weights, config, layers, norm, tied)?;
    decoder.embedding_scale = Some(f64::from(hidden).sqrt() as f32);
    decoder.logit_softcap = config.key_or_null("final_logit_softcapping", 30.0)?;
    Ok(decoder)
}
