//! Ministral 3 (mlx-lm's `ministral3.py`), standalone or the text model of a `mistral3`
//! checkpoint: Llama whose rotary embedding is read from `rope_parameters` (YaRN), and whose
//! rotated queries are scaled by `1 + llama_4_scaling_beta · ln(1 + floor(position /
//! original_max_position_embeddings))`.

use serde::Deserialize;

use super::llama;
use crate::model::blocks::attention::AttentionSpec;
use crate::model::blocks::query_scale::QueryScale;
use crate::model::config::{ModelConfig, parse_rope_scaling};
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// Ministral 3's own keys, defaulting as transformers' `Ministral3Config` does.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Args {
    /// `None`: transformers' default, Ministral 3's YaRN over 16384 positions.
    rope_parameters: Option<serde_json::Value>,
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let parameters = args.rope_parameters.unwrap_or_else(|| {
        serde_json::json!({
            "rope_type": "yarn",
            "rope_theta": 1_000_000.0,
            "factor": 16.0,
            "original_max_position_embeddings": 16384,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale_all_dim": 1.0,
            "mscale": 1.0,
            "llama_4_scaling_beta": 0.1,
        })
    });
    let bad = |message: String| ModelError::Config {
        path: config.path.clone(),
        message: format!("rope_parameters: {message}"),
    };
    let number = |key: &str| {
        parameters
            .get(key)
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| bad(format!("needs {key}, a number")))
    };
    let query_scale = QueryScale::Llama4 {
        beta: number("llama_4_scaling_beta")? as f32,
        original_max_position_embeddings: number("original_max_position_embeddings")? as f32,
    };
    let config = ModelConfig {
        rope_theta: number("rope_theta")? as f32,
        // A GGUF's q and k are permuted for the interleaved rotation (`gguf/config.rs`).
        rope_traditional: config.rope_traditional,
        rope_scaling: parse_rope_scaling(&parameters, &config.raw).map_err(bad)?,
        ..config.clone()
    };
    let layers = llama::layers(&config, weights, |_, attention| AttentionSpec {
        query_scale: Some(query_scale),
        ..attention
    })?;
    Decoder::load(weights, &config, layers)
}
