//! Gemma 3's text model (mlx-lm's `gemma3_text.py`). Every norm scales by `1 + w`, also the one
//! over each query and key head; each block's output is normalized before its residual sum; the
//! MLP is GeGLU; the embedding is scaled by sqrt(hidden) rounded to bfloat16; attention scales by
//! `query_pre_attn_scalar^-0.5`. Of every `sliding_window_pattern` layers all but the last
//! attend within `sliding_window` with the local RoPE base; the last attends globally with
//! `rope_theta` and `rope_scaling`. The head is tied unless the checkpoint has `lm_head`.

use serde::Deserialize;

use crate::model::blocks::attention::{Attention, AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward, SandwichNorms};
use crate::model::blocks::mlp::{Activation, Mlp};
use crate::model::blocks::norm::Norm;
use crate::model::blocks::rope::Rope;
use crate::model::config::{ModelConfig, parse_rope_scaling};
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::LayerCache;
use crate::model::weights::Weights;
use crate::model::window::Window;

/// Gemma 3's own keys, defaulting as transformers' `Gemma3TextConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    /// transformers' 4096 (mlx-lm's is 512).
    sliding_window: i32,
    /// Older configs' pattern, which transformers still reads when `layer_types` is absent.
    sliding_window_pattern: i32,
    query_pre_attn_scalar: f32,
    /// The sliding layers' RoPE base where `rope_parameters` has none per kind.
    rope_local_base_freq: f32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            sliding_window: 4096,
            sliding_window_pattern: 6,
            query_pre_attn_scalar: 256.0,
            rope_local_base_freq: 10_000.0,
        }
    }
}

/// Each layer's window: `layer_types`, else all but every `sliding_window_pattern`-th layer
/// slide.
fn windows(config: &ModelConfig, args: &Args) -> Result<Vec<Option<Window>>, ModelError> {
    let pattern = args.sliding_window_pattern;
    super::sliding_windows(config, args.sliding_window, |index| {
        pattern > 0 && (index + 1) % pattern != 0
    })
}

/// What each layer keeps for a sequence.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    super::attention_caches(config, windows(config, &config.args()?)?)
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
    let args: Args = config.args()?;
    let windows = windows(config, &args)?;
    let scale = args.query_pre_attn_scalar.powf(-0.5);
    let local_rope = match config.rope_parameters_of("sliding_attention") {
        Some(parameters) => kind_rope(config, weights, parameters)?,
        None => Rope::new(config.head_dim, args.rope_local_base_freq, false, None)
            .map_err(|source| weights.mlx_error("building rotary frequencies", source))?,
    };
    let global_rope = match config.rope_parameters_of("full_attention") {
        Some(parameters) => kind_rope(config, weights, parameters)?,
        None => Rope::for_config(config, weights)?,
    };
    let layers = (0..config.num_layers)
        .map(|index| {
            let window = windows[index as usize];
            let sliding = window.is_some();
            let attention = AttentionSpec {
                head_norm: Some(HeadNorm::RmsOffset { eps }),
                scale,
                window,
                ..AttentionSpec::new(
                    config,
                    if sliding { &local_rope } else { &global_rope }.clone(),
                )
            };
            sandwich_layer(weights, config, index, attention)
        })
        .collect::<Result<_, ModelError>>()?;
    let mut decoder = decoder(weights, config, layers)?;
    decoder.embedding_scale = Some(rounded_to_bfloat16((hidden as f32).sqrt()));
    Ok(decoder)
}

/// A Gemma 2 or 3 layer: `attention`, a GeGLU MLP, and `1 + w` RMSNorms before and after each
/// block.
pub(super) fn sandwich_layer(
    weights: &mut Weights,
    config: &ModelConfig,
    index: i32,
    attention: AttentionSpec,
) -> Result<DecoderLayer, ModelError> {
    let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
    let prefix = format!("model.layers.{index}");
    let norm = |weights: &mut Weights, name: &str| {
        Norm::rms_offset(weights, &format!("{prefix}.{name}.weight"), hidden, eps)
    };
    let attention = Attention::load(weights, config, &format!("{prefix}.self_attn"), attention)?;
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
        FeedForward::dense(mlp),
    ))
}

/// Gemma 2's or 3's `layers` under a final `1 + w` norm, the head tied unless the checkpoint has
/// `lm_head`.
pub(super) fn decoder(
    weights: &mut Weights,
    config: &ModelConfig,
    layers: Vec<DecoderLayer>,
) -> Result<Decoder, ModelError> {
    let norm = Norm::rms_offset(
        weights,
        "model.norm.weight",
        config.hidden_size,
        config.rms_norm_eps,
    )?;
    let tied = !weights.contains("lm_head.weight");
    Decoder::load_around(weights, config, layers, norm, tied)
}

/// `value` rounded to the nearest bfloat16 (ties to even), as mlx-lm builds the embedding scale.
fn rounded_to_bfloat16(value: f32) -> f32 {
    let bits = value.to_bits();
    let rounding = 0x7fff + ((bits >> 16) & 1);
    f32::from_bits(bits.wrapping_add(rounding) & 0xffff_0000)
}

/// One layer kind's rotation from transformers 5's `rope_parameters[kind]`: its base and scaling.
fn kind_rope(
    config: &ModelConfig,
    weights: &Weights,
    parameters: &serde_json::Value,
) -> Result<Rope, ModelError> {
    let base = parameters
        .get("rope_theta")
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(10_000.0) as f32;
    let scaling =
        parse_rope_scaling(parameters, &config.raw).map_err(|message| ModelError::Config {
            path: config.path.clone(),
            message: format!("rope_parameters: {message}"),
        })?;
    Rope::new(config.head_dim, base, false, scaling)
        .map_err(|source| weights.mlx_error("building rotary frequencies", source))
}
