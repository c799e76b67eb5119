//! Single-file GGUF models (llama.cpp's format, also Ollama's blobs and LM Studio's files):
//! the header checked in Rust, the tensors read from their blocks in Rust into MLX arrays, the
//! tokenizer, chat template and stop tokens rebuilt from the metadata.

mod blocks;
mod config;
mod fused;
mod ggml_type;
mod header;
pub mod mmproj;
mod tokenizer;
mod weights;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Read;
use std::path::Path;

use tokenizers::Tokenizer;

pub use blocks::{Choices, Requantize};
pub use config::architectures;
pub use header::{GgufError, GgufHeader, Value};

use crate::chat_template::{ChatTemplate, ChatTemplateError};
use crate::model::{Model, ModelConfig, ModelError};

/// Everything a worker takes from one GGUF file.
pub struct GgufModel {
    pub model: Model,
    pub tokenizer: Tokenizer,
    pub chat_template: Option<ChatTemplate>,
    pub eos_token_ids: BTreeSet<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum GgufLoadError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    ChatTemplate(#[from] ChatTemplateError),
}

/// Whether `path` is a file that starts with the GGUF magic (Ollama's blobs have no extension).
pub fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    File::open(path)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok()
        && &magic == b"GGUF"
}

impl GgufModel {
    /// Loads `path` with the default [`Choices`].
    pub fn load(path: &Path) -> Result<Self, GgufLoadError> {
        Self::load_with(path, Choices::default())
    }

    pub fn load_with(path: &Path, choices: Choices) -> Result<Self, GgufLoadError> {
        let header = GgufHeader::read(path)?;
        let (config, tokenizer) = check(&header)?;
        let chat_template = match header.string("tokenizer.chat_template") {
            Some(source) => {
                let (bos, eos) = tokenizer::special_texts(&header, &tokenizer)?;
                Some(ChatTemplate::new(
                    source.to_owned(),
                    path.to_path_buf(),
                    bos,
                    eos,
                )?)
            }
            None => None,
        };
        let eos_token_ids = tokenizer::stop_ids(&header)?.into_iter().collect();
        let weights = weights::load(&header, choices)?;
        let model = Model::from_weights(config, weights, path)?;
        Ok(Self {
            model,
            tokenizer,
            chat_template,
            eos_token_ids,
        })
    }
}

/// Bytes the weights of `header` take once loaded, for each combination of [`Choices`] by its
/// key.
pub fn loaded_bytes(header: &GgufHeader) -> BTreeMap<String, u64> {
    Choices::all()
        .map(|choices| {
            let bytes = header
                .tensors
                .iter()
                .filter_map(|tensor| {
                    let values = tensor.dims.iter().product();
                    let scale_bytes = match weights::tensor_scale_dtype(tensor, choices) {
                        mlx_rs::Dtype::Float32 => 4,
                        _ => 2,
                    };
                    blocks::loaded_bytes(tensor.ggml_type, values, choices.requantize, scale_bytes)
                })
                .sum();
            (choices.key(), bytes)
        })
        .collect()
}

/// Bytes of each element of the activations, and so of the caches, of a model loaded from
/// `header`: its embedding's type sets the forward pass's (`weights::scale_dtype`).
pub fn activation_bytes(header: &GgufHeader) -> u64 {
    let embedding = header
        .tensors
        .iter()
        .find(|tensor| tensor.name == "token_embd.weight");
    let dtype = match embedding.and_then(|tensor| blocks::route(tensor.ggml_type)) {
        Some(blocks::Route::Float(dtype)) => dtype,
        // A quantized embedding's rows come out in the compute type.
        _ => weights::scale_dtype(),
    };
    match dtype {
        mlx_rs::Dtype::Float32 => 4,
        _ => 2,
    }
}

/// Everything that can be decided from the header alone: the tensor types, the architecture and
/// hyperparameters, the tokenizer.
pub fn check(header: &GgufHeader) -> Result<(ModelConfig, Tokenizer), GgufLoadError> {
    header.check_types()?;
    let config = ModelConfig::from_json(config::config_json(header)?, &header.path)?;
    let tokenizer = tokenizer::build(header)?;
    Ok((config, tokenizer))
}

#[cfg(test)]
mod tests;
