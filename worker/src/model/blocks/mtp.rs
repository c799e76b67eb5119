//! A multi-token-prediction layer (DeepSeek V3's and GLM-4.5's next-n layer past
//! `num_hidden_layers`; transformers' `MtpLayer`): beside the model's last hidden state at a
//! position (after its final norm) it reads the embedding of the token after that position, and
//! drafts the token after that one. Both inputs are normed (`enorm`, `hnorm`), concatenated
//! embedding first, projected back to the hidden width (`eh_proj`), run through a decoder block
//! of the model's own kind with a cache of its own, and normed (`shared_head.norm`); the model's
//! head turns that into logits.
//!
//! The layer's cache runs one token behind the sequence: its entry `i` is the token at `i + 1`
//! beside the model's state at `i`. transformers rotates entry `i` as position `i + 1`; the
//! rotation is relative, so rotating every entry as its index instead changes no score.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;

use super::decoder_layer::DecoderLayer;
use super::linear::Linear;
use super::norm::Norm;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::kv_cache::KvCache;
use crate::model::weights::Weights;

pub struct MtpLayer {
    embedding_norm: Norm,
    hidden_norm: Norm,
    projection: Linear,
    block: DecoderLayer,
    norm: Norm,
}

impl MtpLayer {
    /// The layer under `model.layers.{index}` around its decoder `block`; the copies of the
    /// embedding and the head a release carries there are the model's own, so they go.
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        index: i32,
        block: DecoderLayer,
    ) -> Result<Self, ModelError> {
        let prefix = format!("model.layers.{index}");
        let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
        let norm = |weights: &mut Weights, name: &str| {
            Norm::rms(weights, &format!("{prefix}.{name}.weight"), hidden, eps)
        };
        let layer = Self {
            embedding_norm: norm(weights, "enorm")?,
            hidden_norm: norm(weights, "hnorm")?,
            projection: Linear::load(
                weights,
                &format!("{prefix}.eh_proj"),
                hidden,
                2 * hidden,
                false,
                config.quantization,
            )?,
            block,
            norm: norm(weights, "shared_head.norm")?,
        };
        weights.discard_under(&format!("{prefix}.embed_tokens."));
        weights.discard_under(&format!("{prefix}.shared_head.head."));
        Ok(layer)
    }

    /// A sequence's cache for the layer.
    pub fn new_cache(&self) -> KvCache {
        self.block.mixer.new_cache()
    }

    /// The layer's hidden states `[1, positions, hidden]` for `embedded`, the embeddings of the
    /// tokens after `positions` positions whose model hidden states are `previous`.
    pub fn forward(
        &self,
        embedded: &Array,
        previous: &Array,
        cache: &mut KvCache,
    ) -> Result<Array, Exception> {
        let joined = ops::concatenate(
            &[
                self.embedding_norm.forward(embedded)?,
                self.hidden_norm.forward(previous)?,
            ],
            -1,
        )?;
        let projected = self.projection.forward(&joined)?;
        let positions = projected.dim(1);
        let output = self
            .block
            .forward(&projected, &[positions], &mut [cache], None)?;
        self.norm.forward(&output)
    }
}

#[cfg(test)]
mod tests;
