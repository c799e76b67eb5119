//! Qwen3.5 and Qwen3.6, dense (mlx-lm's `qwen3_5.py`): Qwen3-Next's layers, served as the text
//! model of the `qwen3_5` wrapper (its vision tower and multi-token-prediction layer dropped).
//! The gated DeltaNet's input projections are separate (`in_proj_qkv`, `_z`, `_b`, `_a`), every
//! layer's MLP is dense unless `num_experts` is set, and the rotation comes from
//! `rope_parameters`, whose multi-section RoPE (`mrope_section`) rotates text, where all three
//! position ids are equal, as plain RoPE.

use super::qwen3_next::{hybrid, partial_rope, routed_experts};
use crate::model::blocks::moe::MoeSpec;
use crate::model::config::{ModelConfig, parse_rope_scaling};
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let parameters: serde_json::Value =
        config.key_or("rope_parameters", serde_json::Value::Null)?;
    let number = |key: &str, default: f64| {
        parameters
            .get(key)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(default) as f32
    };
    let kind = parameters
        .get("type")
        .or_else(|| parameters.get("rope_type"))
        .and_then(serde_json::Value::as_str);
    let scaling = match kind {
        None | Some("default" | "mrope") => None,
        Some(_) => {
            parse_rope_scaling(&parameters, &config.raw).map_err(|message| ModelError::Config {
                path: config.path.clone(),
                message: format!("rope_parameters: {message}"),
            })?
        }
    };
    let rope = partial_rope(
        config,
        weights,
        number("partial_rotary_factor", 0.25),
        number("rope_theta", 100_000.0),
        scaling,
    )?;
    let experts: i32 = config.key_named_or(&["num_experts", "num_local_experts"], 0)?;
    let sparse = vec![experts > 0; config.num_layers as usize];
    hybrid(
        config,
        weights,
        rope,
        sparse,
        config.key_or("norm_topk_prob", true)?,
    )
}

/// The routed experts of a Qwen3.5 config (`None` for a dense one).
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    routed_experts(config, config.key_or("norm_topk_prob", true)?)
}
