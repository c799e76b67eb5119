//! SmolLM3 (mlx-lm's `smollm3.py`): Llama whose every `no_rope_layer_interval`-th layer has no
//! rotary embedding (NoPE), or the layers `no_rope_layers` marks with 0.

use serde::Deserialize;

use super::llama;
use crate::model::blocks::attention::AttentionSpec;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// SmolLM3's own keys, defaulting as transformers' `SmolLM3Config` does: without
/// `no_rope_layers`, every `no_rope_layer_interval`-th layer goes without the rotation.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    no_rope_layers: Option<Vec<i32>>,
    no_rope_layer_interval: i32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            no_rope_layers: None,
            no_rope_layer_interval: 4,
        }
    }
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let Args {
        no_rope_layers,
        no_rope_layer_interval: interval,
    } = config.args()?;
    let uses_rope: Vec<i32> = match no_rope_layers {
        Some(flags) => flags,
        None if interval > 0 => (0..config.num_layers)
            .map(|index| i32::from((index + 1) % interval != 0))
            .collect(),
        None => vec![1; config.num_layers as usize],
    };
    if uses_rope.len() != config.num_layers as usize {
        return Err(ModelError::Config {
            path: config.path.clone(),
            message: format!(
                "no_rope_layers has {} entries for {} layers",
                uses_rope.len(),
                config.num_layers
            ),
        });
    }
    let layers = llama::layers(config, weights, |index, attention| AttentionSpec {
        rope: attention.rope.filter(|_| uses_rope[index as usize] != 0),
        ..attention
    })?;
    Decoder::load(weights, config, layers)
}
