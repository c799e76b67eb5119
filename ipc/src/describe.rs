//! What a worker makes of a model's files without loading them.
//!
//! `corral-worker describe PATH...` prints one [`ModelDescription`] per path as a JSON line; the
//! supervisor lists models with it. Model formats live in the worker, so the worker alone decides
//! what a file holds and whether it can be served; the supervisor only finds the files.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::SamplingValues;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelDescription {
    /// The model directory or `.gguf` file, as given.
    pub path: PathBuf,
    pub format: ModelFormat,
    /// `general.architecture` of a GGUF, `model_type` of a `config.json`.
    pub architecture: Option<String>,
    /// How the weights are stored: `Q4_1`, `Q8_0`, `4-bit`, `f32`, `bf16`, or a mix (`Q4_1+Q8_0`).
    pub quantization: Option<String>,
    /// Bytes of the weight files.
    pub size_bytes: u64,
    /// Parameters of the model served (a wrapper's text model, not its vision tower), counted
    /// from the weights' shapes, a quantized tensor at its unpacked size; `None` when unknown.
    #[serde(default)]
    pub parameters: Option<u64>,
    /// For a mixture of experts, the parameters one token runs through: the dense parts, the
    /// shared experts and `top_k` of the routed experts; `None` for a dense model.
    #[serde(default)]
    pub active_parameters: Option<u64>,
    /// Bytes a GGUF's weights take once loaded, for each combination of the `gguf_requantize`
    /// and `gguf_exact_k_quants` settings, under [`gguf_loaded_key`]: some types are requantized
    /// and scales are stored per group of 32, so it is not the file's size. Empty for a
    /// directory (loaded as stored) and an unservable GGUF.
    #[serde(default)]
    pub gguf_loaded_bytes: BTreeMap<String, u64>,
    /// What the model's caches take for one sequence, read by the worker from the
    /// architecture's own layout (`None` when it cannot tell): the memory estimate's KV reserve.
    #[serde(default)]
    pub cache: Option<CacheSize>,
    /// Why the worker cannot serve this model; `None` when it can.
    pub unservable: Option<String>,
    /// What the model does, from its files; an older worker's description reads as `Chat`.
    #[serde(default)]
    pub kind: ModelKind,
    /// Whether the model reads images: its files hold a vision tower the worker runs.
    #[serde(default)]
    pub vision: bool,
    /// What the vision tower's activations take while it encodes one image of a megapixel (a
    /// screenshot; the processor's largest where that is smaller): the memory estimate's
    /// reserve for images. 0 without a tower.
    #[serde(default)]
    pub vision_reserve_bytes: u64,
    /// The sampling a GGUF's `general.sampling.*` metadata recommends.
    #[serde(default)]
    pub gguf_sampling: SamplingValues,
    /// The sampling the model folder's `generation_config.json` recommends.
    #[serde(default)]
    pub generation_config: SamplingValues,
    /// What the worker found wrong but could serve anyway (a malformed `generation_config.json`),
    /// each naming its file, for the supervisor to log.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The checkpoint's multi-token-prediction layers (`speculative = "mtp"`).
    #[serde(default)]
    pub mtp: MtpLayers,
}

/// Whether a checkpoint carries the multi-token-prediction layers its config names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MtpLayers {
    /// Its config names none.
    #[default]
    None,
    /// Its weights hold them: `speculative = "mtp"` can draft with them.
    Kept,
    /// Its config names some its weights lack: a conversion dropped them (mlx-community's do).
    Dropped,
}

/// What one sequence's caches take, in the type they are kept in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheSize {
    /// Bytes each position adds across the layers that keep every position.
    pub bytes_per_position: u64,
    /// The sliding-window layers, each keeping at most its window's positions.
    pub windowed: Vec<WindowedCache>,
    /// Bytes of the recurrent layers' states, the same at any length.
    pub bytes_per_sequence: u64,
}

/// A sliding-window layer's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowedCache {
    pub window: u64,
    pub bytes_per_position: u64,
}

impl CacheSize {
    /// Bytes one sequence of `positions` positions holds.
    pub fn bytes_for(&self, positions: u64) -> u64 {
        self.windowed
            .iter()
            .map(|layer| {
                layer
                    .window
                    .min(positions)
                    .saturating_mul(layer.bytes_per_position)
            })
            .fold(
                self.bytes_per_position
                    .saturating_mul(positions)
                    .saturating_add(self.bytes_per_sequence),
                u64::saturating_add,
            )
    }
}

/// The key of [`ModelDescription::gguf_loaded_bytes`] for a model loaded with `gguf_requantize`
/// (`8bit`, `6bit`, `f16`) and, or not, `gguf_exact_k_quants`: `8bit`, `8bit+exact`.
pub fn gguf_loaded_key(requantize: &str, exact_k_quants: bool) -> String {
    if exact_k_quants {
        format!("{requantize}+exact")
    } else {
        requantize.to_owned()
    }
}

/// The requests a model answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// A causal language model: chat, completions, Responses, Messages.
    #[default]
    Chat,
    /// A model that maps texts to vectors: `/v1/embeddings`.
    Embedding,
    /// A model that scores query-document pairs: `/v1/rerank`.
    Rerank,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelFormat {
    /// A Hugging Face or MLX directory: `config.json` and `*.safetensors`.
    Safetensors,
    /// One `.gguf` file, as llama.cpp, Ollama and LM Studio keep them.
    Gguf,
}
