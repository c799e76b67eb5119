//! LFM2 (mlx-lm's `lfm2.py`): most layers mix positions with a gated short convolution, whose
//! only state is its last `conv_L_cache - 1` inputs; the layers `full_attn_idxs` names (or
//! `layer_types` calls `full_attention`) attend, with a norm over each query and key head. The
//! feed-forward block is SwiGLU, its width adjusted from `block_ff_dim` as transformers does; the
//! final norm is `embedding_norm` and the head is always the embedding's transpose.
//!
//! Checkpoints name the layers `operator_norm`, `ffn_norm`, `q_layernorm`, `k_layernorm`,
//! `out_proj` and `feed_forward.w1/w3/w2`; they are renamed to the blocks' names on load. The
//! Hugging Face layout's conv weight is `[hidden, 1, kernel]`, moved as mlx-lm's `sanitize` does.

use serde::Deserialize;

use crate::model::blocks::attention::{Attention, AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward, Mixer};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::norm::Norm;
use crate::model::blocks::rope::Rope;
use crate::model::blocks::short_conv::{self, ShortConv};
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::{CacheShape, LayerCache};
use crate::model::weights::Weights;

/// LFM2's own keys, defaulting as transformers' `Lfm2Config` does; LFM2-MoE's class defaults the
/// convolution's alike and has no default layer list.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    #[serde(rename = "conv_L_cache")]
    conv_l_cache: i32,
    conv_bias: bool,
    full_attn_idxs: Option<Vec<usize>>,
    layer_types: Option<Vec<String>>,
    rope_parameters: Option<serde_json::Value>,
    /// transformers 5 keeps it in `rope_parameters`; the class's base is 1e6.
    rope_theta: f32,
    block_ff_dim: Option<i32>,
    /// true, transformers' default (corral had false; mlx-lm has none).
    block_auto_adjust_ff_dim: bool,
    block_ffn_dim_multiplier: Option<f64>,
    block_multiple_of: i32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            conv_l_cache: 3,
            conv_bias: false,
            full_attn_idxs: None,
            layer_types: None,
            rope_parameters: None,
            rope_theta: 1_000_000.0,
            block_ff_dim: None,
            block_auto_adjust_ff_dim: true,
            block_ffn_dim_multiplier: Some(1.0),
            block_multiple_of: 256,
        }
    }
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let inner = feed_forward_width(config, &config.args()?)?;
    hybrid(config, weights, |weights, _, prefix| {
        let mlp = format!("{prefix}.feed_forward");
        rename_feed_forward(weights, &mlp);
        Ok(FeedForward::dense(Mlp::load(
            weights, config, &mlp, inner, false,
        )?))
    })
}

/// What each layer of LFM2 and LFM2-MoE keeps for a sequence: an attention layer its keys and
/// values, a convolution its last inputs.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    let args: Args = config.args()?;
    let kernel = args.conv_l_cache;
    Ok(attention_layers(config, &args)?
        .into_iter()
        .map(|attends| match attends {
            true => LayerCache::Positions {
                shape: CacheShape::heads(config.num_kv_heads, config.head_dim),
                window: None,
            },
            false => LayerCache::State(short_conv::state_shape(kernel, config.hidden_size)),
        })
        .collect())
}

/// The layers LFM2 and LFM2-MoE share, each layer's feed-forward block loaded by
/// `feed_forward` from the layer's index and prefix.
pub(super) fn hybrid(
    config: &ModelConfig,
    weights: &mut Weights,
    feed_forward: impl Fn(&mut Weights, i32, &str) -> Result<FeedForward, ModelError>,
) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
    let attends = attention_layers(config, &args)?;
    let kernel = args.conv_l_cache;
    if kernel < 2 {
        return Err(ModelError::Config {
            path: config.path.clone(),
            message: format!("conv_L_cache {kernel} must be at least 2"),
        });
    }
    let conv_bias = args.conv_bias;
    let rope = rope(config, &args, weights)?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let prefix = format!("model.layers.{index}");
            let mixer = if attends[index as usize] {
                let attention = format!("{prefix}.self_attn");
                for (from, to) in [
                    ("q_layernorm", "q_norm"),
                    ("k_layernorm", "k_norm"),
                    ("out_proj", "o_proj"),
                ] {
                    weights
                        .rename_layer(&format!("{attention}.{from}"), &format!("{attention}.{to}"));
                }
                let spec = AttentionSpec {
                    head_dim: hidden / config.num_heads,
                    head_norm: Some(HeadNorm::Rms { eps }),
                    scale: ((hidden / config.num_heads) as f32).powf(-0.5),
                    ..AttentionSpec::new(config, rope.clone())
                };
                Attention::load(weights, config, &attention, spec)?.into()
            } else {
                Mixer::ShortConv(Box::new(ShortConv::load(
                    weights,
                    config,
                    &format!("{prefix}.conv"),
                    kernel,
                    conv_bias,
                )?))
            };
            let norm = |weights: &mut Weights, name: &str| {
                Norm::rms(weights, &format!("{prefix}.{name}.weight"), hidden, eps)
            };
            Ok(DecoderLayer {
                input_norm: norm(weights, "operator_norm")?,
                mixer,
                post_attention_norm: None,
                pre_feed_forward_norm: norm(weights, "ffn_norm")?,
                feed_forward: feed_forward(weights, index, &prefix)?,
                post_feed_forward_norm: None,
                residual_scale: None,
                per_layer_gate: None,
                output_scale: None,
            })
        })
        .collect::<Result<_, ModelError>>()?;
    let final_norm = Norm::rms(weights, "model.embedding_norm.weight", hidden, eps)?;
    Decoder::load_around(weights, config, layers, final_norm, true)
}

/// `feed_forward.w1`, `w3`, `w2` under `mlp` as the gate, up and down projections.
pub(super) fn rename_feed_forward(weights: &mut Weights, mlp: &str) {
    for (from, to) in [("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")] {
        weights.rename_layer(&format!("{mlp}.{from}"), &format!("{mlp}.{to}"));
    }
}

/// Whether each layer attends: `full_attn_idxs` where config.json has it, else the layers
/// `layer_types` calls `full_attention`.
fn attention_layers(config: &ModelConfig, args: &Args) -> Result<Vec<bool>, ModelError> {
    let layers = config.num_layers as usize;
    if let Some(indices) = &args.full_attn_idxs {
        return Ok((0..layers).map(|index| indices.contains(&index)).collect());
    }
    // transformers' LFM2 default: every layer attention; LFM2-MoE's class keeps `null` and its
    // model cannot run without a list, nor can mlx-lm's.
    let types = match &args.layer_types {
        Some(types) => types.clone(),
        None if config.model_type == "lfm2" => vec!["full_attention".to_owned(); layers],
        None => {
            return Err(ModelError::Config {
                path: config.path.clone(),
                message: format!("{} needs layer_types", config.model_type),
            });
        }
    };
    if types.len() != layers {
        return Err(ModelError::Config {
            path: config.path.clone(),
            message: format!(
                "layer_types names {} layers, num_hidden_layers is {layers}",
                types.len()
            ),
        });
    }
    Ok(types.iter().map(|kind| kind == "full_attention").collect())
}

/// The rotation over each whole head at `rope_parameters.rope_theta`, else `rope_theta`, else
/// the classes' (and mlx-lm's) default of 1e6.
fn rope(config: &ModelConfig, args: &Args, weights: &Weights) -> Result<Rope, ModelError> {
    let base = match args
        .rope_parameters
        .as_ref()
        .and_then(|parameters| parameters.get("rope_theta"))
        .and_then(serde_json::Value::as_f64)
    {
        Some(base) => base as f32,
        None => args.rope_theta,
    };
    Rope::new(config.hidden_size / config.num_heads, base, false, None)
        .map_err(|source| weights.mlx_error("building rotary frequencies", source))
}

/// The SwiGLU width transformers' `Lfm2MLP` derives: with `block_auto_adjust_ff_dim`, two
/// thirds of `block_ff_dim`, then, unless `block_ffn_dim_multiplier` is `null`, times it rounded
/// up to `block_multiple_of` (mlx-lm rounds also after a `null` multiplier).
fn feed_forward_width(config: &ModelConfig, args: &Args) -> Result<i32, ModelError> {
    let width = match args.block_ff_dim {
        Some(width) => width,
        None => config.intermediate_size()?,
    };
    if !args.block_auto_adjust_ff_dim {
        return Ok(width);
    }
    let width = (2 * width) / 3;
    let Some(multiplier) = args.block_ffn_dim_multiplier else {
        return Ok(width);
    };
    let width = (multiplier * f64::from(width)) as i32;
    let multiple = args.block_multiple_of;
    if multiple <= 0 {
        return Err(ModelError::Config {
            path: config.path.clone(),
            message: format!("block_multiple_of {multiple} must be positive"),
        });
    }
    Ok(multiple * ((width + multiple - 1) / multiple))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    #[test]
    fn lfm2_350m_config_reads_with_its_own_key_names_and_adjusted_width() {
        // LiquidAI/LFM2-350M's keys: `norm_eps`, and `block_ff_dim` beside (or instead of)
        // `intermediate_size`; its `w1` is [4608, 1024].
        let config = json!({
            "model_type": "lfm2", "hidden_size": 1024, "block_ff_dim": 6656,
            "block_auto_adjust_ff_dim": true, "block_ffn_dim_multiplier": 1.0,
            "block_multiple_of": 256, "num_hidden_layers": 16, "num_attention_heads": 16,
            "num_key_value_heads": 8, "vocab_size": 65536, "norm_eps": 1e-5,
            "conv_L_cache": 3, "full_attn_idxs": [2, 5, 8, 10, 12, 14],
        });
        let config = ModelConfig::from_json(config, Path::new("config.json")).unwrap();
        assert_eq!(
            (config.intermediate_size().unwrap(), config.rms_norm_eps),
            (6656, 1e-5)
        );
        let args = config.args().unwrap();
        assert_eq!(feed_forward_width(&config, &args).unwrap(), 4608);
        let attends = attention_layers(&config, &args).unwrap();
        assert_eq!(
            (0..16).filter(|&index| attends[index]).collect::<Vec<_>>(),
            vec![2, 5, 8, 10, 12, 14]
        );
    }

    #[test]
    fn without_its_keys_the_width_is_adjusted_as_transformers_defaults() {
        // Lfm2Config: block_auto_adjust_ff_dim true, multiplier 1.0, multiple of 256.
        let config = json!({
            "model_type": "lfm2", "hidden_size": 64, "intermediate_size": 1000,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 128, "norm_eps": 1e-5,
        });
        let config = ModelConfig::from_json(config, Path::new("config.json")).unwrap();
        let args = config.args().unwrap();
        assert_eq!(feed_forward_width(&config, &args).unwrap(), 768);
        assert_eq!(attention_layers(&config, &args).unwrap(), vec![true, true]);
        // A `null` multiplier leaves two thirds unrounded, as `Lfm2MLP` does.
        let mut args = args;
        args.block_ffn_dim_multiplier = None;
        assert_eq!(feed_forward_width(&config, &args).unwrap(), 666);
    }
}
