//! Gemma 2 (mlx-lm's `gemma2.py`, transformers' `Gemma2Model`). Every norm scales by `1 + w`;
//! each block's output is normalized before its residual sum; the MLP is GeGLU; the embedding is
//! scaled by sqrt(hidden); attention scales by `query_pre_attn_scalar^-0.5` and caps its scores
//! softly at `attn_logit_softcapping`, the logits at `final_logit_softcapping`. The layers
//! `layer_types` names sliding (every even one by default) attend within `sliding_window`, as
//! transformers does; mlx-lm attends globally in all. The head is tied unless the checkpoint has
//! `lm_head`.

use serde::Deserialize;

use crate::model::blocks::attention::AttentionSpec;
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::LayerCache;
use crate::model::weights::Weights;
use crate::model::window::Window;

use super::gemma3_text::{decoder, sandwich_layer};

/// Gemma 2's own keys, defaulting as transformers' `Gemma2Config` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    sliding_window: i32,
    query_pre_attn_scalar: f32,
    /// `null` turns the cap off.
    attn_logit_softcapping: Option<f32>,
    final_logit_softcapping: Option<f32>,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            sliding_window: 4096,
            query_pre_attn_scalar: 256.0,
            attn_logit_softcapping: Some(50.0),
            final_logit_softcapping: Some(30.0),
        }
    }
}

/// Each layer's window: `layer_types`, else every even layer slides.
fn windows(config: &ModelConfig, args: &Args) -> Result<Vec<Option<Window>>, ModelError> {
    super::sliding_windows(config, args.sliding_window, |index| index % 2 == 0)
}

/// What each layer keeps for a sequence.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    super::attention_caches(config, windows(config, &config.args()?)?)
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let hidden = config.hidden_size;
    let args: Args = config.args()?;
    let windows = windows(config, &args)?;
    let scale = args.query_pre_attn_scalar.powf(-0.5);
    let softcap = args.attn_logit_softcapping;
    let rope = Rope::for_config(config, weights)?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let attention = AttentionSpec {
                scale,
                softcap,
                window: windows[index as usize],
                ..AttentionSpec::new(config, rope.clone())
            };
            sandwich_layer(weights, config, index, attention)
        })
        .collect::<Result<_, ModelError>>()?;
    let mut decoder = decoder(weights, config, layers)?;
    decoder.embedding_scale = Some(f64::from(hidden).sqrt() as f32);
    decoder.logit_softcap = args.final_logit_softcapping;
    Ok(decoder)
}
