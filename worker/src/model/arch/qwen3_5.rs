//! Qwen3.5 and Qwen3.6, dense (mlx-lm's `qwen3_5.py`): Qwen3-Next's layers, served as the text
//! model of the `qwen3_5` wrapper, with its vision tower and, where the checkpoint kept it, its
//! multi-token-prediction layer (see [`hybrid`]).
//! The gated DeltaNet's input projections are separate (`in_proj_qkv`, `_z`, `_b`, `_a`), every
//! layer's MLP is dense unless `num_experts` is set, and the rotation comes from
//! `rope_parameters`, whose multi-section RoPE (`mrope_section`) rotates text, where all three
//! position ids are equal, as plain RoPE.

use serde::Deserialize;

use super::qwen3_next::{hybrid, partial_rope};
use crate::model::blocks::moe::{MoeSpec, Routing};
use crate::model::config::{ModelConfig, parse_rope_scaling};
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// Qwen3.5's own keys, defaulting as transformers' `Qwen3_5TextConfig` (dense) and
/// `Qwen3_5MoeTextConfig` (`qwen3_5_moe`) do; the expert keys are `None` where the type's class
/// sets them (see [`Args::moe`]).
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    rope_parameters: Option<serde_json::Value>,
    /// `num_experts` first where a config has both spellings.
    num_experts: Option<i32>,
    num_local_experts: Option<i32>,
    num_experts_per_tok: Option<i32>,
    moe_intermediate_size: Option<i32>,
    shared_expert_intermediate_size: Option<i32>,
    /// Neither class has it: transformers always renormalizes, as mlx-lm's default does.
    norm_topk_prob: bool,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            rope_parameters: None,
            num_experts: None,
            num_local_experts: None,
            num_experts_per_tok: None,
            moe_intermediate_size: None,
            shared_expert_intermediate_size: None,
            norm_topk_prob: true,
        }
    }
}

impl Args {
    /// The routed experts and the shared expert's width: `Qwen3_5MoeTextConfig`'s defaults
    /// (256 experts, top 8, 512 wide, shared 512); the dense class has no experts (mlx-lm: 0,
    /// their width the dense MLP's).
    fn moe(&self, config: &ModelConfig) -> Result<(MoeSpec, i32), ModelError> {
        let (experts, top_k, inner, shared) = match config.model_type.as_str() {
            "qwen3_5_moe" => (256, 8, Some(512), 512),
            _ => (0, 1, None, 0),
        };
        let inner = match self.moe_intermediate_size.or(inner) {
            Some(inner) => inner,
            None => config.intermediate_size()?,
        };
        let spec = MoeSpec::new(
            self.num_experts
                .or(self.num_local_experts)
                .unwrap_or(experts),
            self.num_experts_per_tok.unwrap_or(top_k),
            inner,
            Routing::SoftmaxTopK {
                normalize: self.norm_topk_prob,
            },
        );
        Ok((spec, self.shared_expert_intermediate_size.unwrap_or(shared)))
    }
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let parameters = args
        .rope_parameters
        .clone()
        .unwrap_or(serde_json::Value::Null);
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
        rope_base(config, &parameters),
        scaling,
    )?;
    // transformers' Qwen3.5 rotation always interleaves the sections, whatever
    // `mrope_interleaved` says; text rotates as plain RoPE, an image's tokens by their own
    // positions.
    let section = parameters
        .get("mrope_section")
        .map(|section| serde_json::from_value::<[i32; 3]>(section.clone()))
        .transpose()
        .map_err(|error| ModelError::Config {
            path: config.path.clone(),
            message: format!("rope_parameters.mrope_section: {error}"),
        })?
        .unwrap_or(MROPE_SECTION);
    let rope = rope
        .with_sections(section, true)
        .map_err(|source| weights.mlx_error("assigning the rotation's sections", source))?;
    let (moe, shared_inner) = args.moe(config)?;
    let sparse = vec![moe.experts > 0; config.num_layers as usize];
    hybrid(config, weights, rope, sparse, moe, shared_inner)
}

/// `Qwen3_5TextRotaryEmbedding`'s sections where `rope_parameters` gives none: pairs turning by
/// time, row and column.
const MROPE_SECTION: [i32; 3] = [11, 11, 10];

/// The rotation's base: `rope_parameters.rope_theta`, else the config's `rope_theta`, whose
/// default is transformers' 10000 (mlx-lm's 100000, which corral took, departs).
fn rope_base(config: &ModelConfig, parameters: &serde_json::Value) -> f32 {
    parameters
        .get("rope_theta")
        .and_then(serde_json::Value::as_f64)
        .map_or(config.rope_theta, |base| base as f32)
}

/// The routed experts of a Qwen3.5 config (`None` for a dense one).
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    let (spec, _) = config.args::<Args>()?.moe(config)?;
    Ok((spec.experts > 0).then_some(spec))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    #[test]
    fn the_base_defaults_as_transformers_and_rope_parameters_decide() {
        let base = |rope: Option<serde_json::Value>| {
            let mut text = json!({
                "model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 128, "rms_norm_eps": 1e-6,
            });
            if let Some(rope) = rope {
                text["rope_parameters"] = rope;
            }
            let config = json!({"model_type": "qwen3_5", "text_config": text});
            let config = ModelConfig::from_json(config, Path::new("config.json")).unwrap();
            let args: Args = config.args().unwrap();
            rope_base(&config, &args.rope_parameters.unwrap_or_default())
        };
        // Qwen3_5TextConfig writes `rope_parameters.rope_theta` 10000 when none is given.
        assert_eq!(base(None), 10_000.0);
        let release = json!({"rope_type": "default", "rope_theta": 10_000_000.0});
        assert_eq!(base(Some(release)), 10_000_000.0);
    }
}
