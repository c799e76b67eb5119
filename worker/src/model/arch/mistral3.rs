//! Mistral Small 3.1/3.2 and Ministral 3 as released (mlx-lm's `mistral3.py`): a vision model
//! whose text model is served alone (see [`Wrapper`](crate::model::config::Wrapper)). The text
//! model is Ministral 3's when `text_config.model_type` says so, else Llama's.

use serde::Deserialize;

use super::{llama, ministral3};
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// The text model's own keys: its `model_type`, which transformers' `Mistral3Config` defaults
/// to Mistral's (built as Llama's here).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Args {
    model_type: Option<String>,
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    match config.args::<Args>()?.model_type.as_deref() {
        Some("ministral3") => ministral3::build(config, weights),
        _ => llama::build(config, weights),
    }
}
