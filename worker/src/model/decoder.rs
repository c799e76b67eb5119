//! The stack an architecture wires: token embedding, layers, final norm and output head.

use super::blocks::decoder_layer::DecoderLayer;
use super::blocks::linear::{Embedding, Linear};
use super::blocks::mtp::MtpLayer;
use super::blocks::norm::Norm;
use super::blocks::per_layer_input::PerLayerInputs;
use super::config::ModelConfig;
use super::error::ModelError;
use super::weights::Weights;

/// The layers between the token embedding and the logits, as an architecture wires them.
pub struct Decoder {
    pub(super) embed_tokens: Embedding,
    pub(super) layers: Vec<DecoderLayer>,
    pub(super) norm: Norm,
    /// `None` when the output projection is tied to the embedding table.
    pub(super) lm_head: Option<Linear>,
    /// Multiplies the embedded tokens (Granite).
    pub(super) embedding_scale: Option<f32>,
    /// Multiplies the logits (Granite divides them).
    pub(super) logit_scale: Option<f32>,
    /// Caps the logits at ±c softly, `c · tanh(logits / c)` (Gemma 4).
    pub(super) logit_softcap: Option<f32>,
    /// Each layer's extra input (Gemma 4).
    pub(super) per_layer_inputs: Option<PerLayerInputs>,
    /// For each layer, the index of its cache among those a sequence holds: one per layer with
    /// keys and values of its own, which a KV-shared layer reads from its source's.
    pub(super) cache_of_layer: Vec<usize>,
    /// The multi-token-prediction layer, where the checkpoint has one that runs.
    pub(super) mtp: Option<MtpLayer>,
}

impl Decoder {
    /// `layers` between Llama's `model.embed_tokens`, `model.norm` and `lm_head` (tied to the
    /// embedding when config.json says so or the checkpoint has none).
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        layers: Vec<DecoderLayer>,
    ) -> Result<Self, ModelError> {
        let tied = config
            .tie_word_embeddings
            .unwrap_or(!weights.contains("lm_head.weight"));
        let norm = Norm::rms(
            weights,
            "model.norm.weight",
            config.hidden_size,
            config.rms_norm_eps,
        )?;
        Self::load_around(weights, config, layers, norm, tied)
    }

    /// `layers` and the final `norm` between the embedding and the head (the embedding's
    /// transpose when `tied`).
    pub fn load_around(
        weights: &mut Weights,
        config: &ModelConfig,
        layers: Vec<DecoderLayer>,
        norm: Norm,
        tied: bool,
    ) -> Result<Self, ModelError> {
        let quant = config.quantization;
        let (vocab, hidden) = (config.vocab_size, config.hidden_size);
        let embed_tokens = Embedding::load(weights, "model.embed_tokens", vocab, hidden, quant)?;
        let lm_head = if tied {
            weights.discard("lm_head.weight");
            None
        } else {
            Some(Linear::load(
                weights, "lm_head", vocab, hidden, false, quant,
            )?)
        };
        let cache_of_layer = cache_of_layer(&layers).ok_or_else(|| ModelError::Config {
            path: config.path.clone(),
            message: "a KV-shared layer reads a layer that does not come before it".into(),
        })?;
        Ok(Self {
            embed_tokens,
            layers,
            norm,
            lm_head,
            embedding_scale: None,
            logit_scale: None,
            logit_softcap: None,
            per_layer_inputs: None,
            cache_of_layer,
            mtp: None,
        })
    }

    /// The decoder with its multi-token-prediction layer.
    pub fn with_mtp(self, mtp: Option<MtpLayer>) -> Self {
        Self { mtp, ..self }
    }
}

/// Caches are numbered in layer order over the layers that hold one; `None` when a layer shares
/// the keys and values of one that does not run before it.
fn cache_of_layer(layers: &[DecoderLayer]) -> Option<Vec<usize>> {
    let mut caches: Vec<usize> = Vec::with_capacity(layers.len());
    let mut held = 0;
    for layer in layers {
        match layer.mixer.shared_kv() {
            Some(source) => caches.push(*caches.get(source)?),
            None => {
                caches.push(held);
                held += 1;
            }
        }
    }
    Some(caches)
}
