//! Gemma 2 (mlx-lm's `gemma2.py`, transformers' `Gemma2Model`). Every norm scales by `1 + w`;
//! each block's output is normalized before its residual sum; the MLP is GeGLU; the embedding is
//! scaled by sqrt(hidden); attention scales by `query_pre_attn_scalar^-0.5` and caps its scores
//! softly at `attn_logit_softcapping`, the logits at `final_logit_softcapping`. The layers
//! `layer_types` names sliding (every even one by default) attend within `sliding_window`, as
//! transformers does; mlx-lm attends globally in all. The head is tied unless the checkpoint has
//! `lm_head`.

use crate::model::blocks::attention::AttentionSpec;
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::LayerCache;
use crate::model::weights::Weights;
use crate::model::window::Window;

use super::gemma3_text::{decoder, sandwich_layer};

/// Each layer's window: `layer_types`, else every even layer slides.
fn windows(config: &ModelConfig) -> Result<Vec<Option<Window>>, ModelError> {
    super::sliding_windows(config, 4096, |index| index % 2 == 0)
}

/// What each layer keeps for a sequence.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    super::attention_caches(config, windows(config)?)
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let hidden = config.hidden_size;
    let windows = windows(config)?;
    let scale = config.key_or("query_pre_attn_scalar", 256.0f32)?.powf(-0.5);
    let softcap = config.key_or_null("attn_logit_softcapping", 50.0f32)?;
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
    decoder.logit_softcap = config.key_or_null("final_logit_softcapping", 30.0)?;
    Ok(decoder)
}
