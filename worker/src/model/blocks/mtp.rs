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

/// Where a release keeps an MTP layer's own weights (its block's are a layer's names under its
/// own prefix).
pub struct MtpNames {
    pub embedding_norm: String,
    pub hidden_norm: String,
    pub projection: String,
    pub norm: String,
}

impl MtpNames {
    /// DeepSeek V3's and GLM-4.5's next-n layer, `model.layers.{index}`.
    pub fn next_n(index: i32) -> Self {
        let at = |name: &str| format!("model.layers.{index}.{name}");
        Self {
            embedding_norm: at("enorm"),
            hidden_norm: at("hnorm"),
            projection: at("eh_proj"),
            norm: at("shared_head.norm"),
        }
    }

    /// Qwen3.5's and Qwen3-Next's, under `mtp.` (its block `mtp.layers.0`).
    pub fn qwen() -> Self {
        let at = |name: &str| format!("mtp.{name}");
        Self {
            embedding_norm: at("pre_fc_norm_embedding"),
            hidden_norm: at("pre_fc_norm_hidden"),
            projection: at("fc"),
            norm: at("norm"),
        }
    }
}

impl MtpLayer {
    /// The layer named by `names` around its decoder `block`, its norms as the model's
    /// (`norm` loads one by its weight's name).
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        names: &MtpNames,
        block: DecoderLayer,
        norm: impl Fn(&mut Weights, &str) -> Result<Norm, ModelError>,
    ) -> Result<Self, ModelError> {
        let weight = |name: &str| format!("{name}.weight");
        let hidden = config.hidden_size;
        Ok(Self {
            embedding_norm: norm(weights, &weight(&names.embedding_norm))?,
            hidden_norm: norm(weights, &weight(&names.hidden_norm))?,
            projection: Linear::load(
                weights,
                &names.projection,
                hidden,
                2 * hidden,
                false,
                config.quantization,
            )?,
            block,
            norm: norm(weights, &weight(&names.norm))?,
        })
    }

    /// DeepSeek V3's and GLM-4.5's next-n layer at `model.layers.{index}`, with plain RMSNorms.
    pub fn load_next_n(
        weights: &mut Weights,
        config: &ModelConfig,
        index: i32,
        block: DecoderLayer,
    ) -> Result<Self, ModelError> {
        let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
        let norm = |weights: &mut Weights, name: &str| Norm::rms(weights, name, hidden, eps);
        Self::load(weights, config, &MtpNames::next_n(index), block, norm)
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
