//! Everything a worker loads for its model: weights, tokenizer, chat template, stop tokens and
//! generation defaults. Built and used only on the engine thread.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokenizers::Tokenizer;

use crate::chat_template::{ChatTemplate, ChatTemplateError};
use crate::gguf::{self, GgufLoadError, GgufModel};
use crate::model::{Model, ModelError};
use crate::model_json::JsonFileError;
use crate::stop_tokens::{GenerationDefaults, eos_token_ids, generation_defaults};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("{path}: cannot load tokenizer: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error(transparent)]
    ChatTemplate(#[from] ChatTemplateError),
    #[error(transparent)]
    ModelFile(#[from] JsonFileError),
    #[error("{path}: neither a model directory nor a GGUF file")]
    NotAModel { path: PathBuf },
    #[error(transparent)]
    Gguf(#[from] GgufLoadError),
}

pub struct LoadedModel {
    /// The model directory or GGUF file.
    pub dir: PathBuf,
    pub model: Model,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: Option<ChatTemplate>,
    pub eos_token_ids: BTreeSet<u32>,
    pub defaults: GenerationDefaults,
    pub load_time: Duration,
}

impl LoadedModel {
    /// Loads a Hugging Face / MLX directory or a single GGUF file.
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        let started = Instant::now();
        if gguf::is_gguf(path) {
            let loaded = GgufModel::load(path)?;
            return Ok(Self {
                dir: path.to_path_buf(),
                model: loaded.model,
                tokenizer: Arc::new(loaded.tokenizer),
                chat_template: loaded.chat_template,
                eos_token_ids: loaded.eos_token_ids,
                defaults: GenerationDefaults::default(),
                load_time: started.elapsed(),
            });
        }
        let dir = path;
        if !dir.is_dir() {
            return Err(LoadError::NotAModel {
                path: dir.to_path_buf(),
            });
        }
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|error| LoadError::Tokenizer {
                path: tokenizer_path.clone(),
                message: error.to_string(),
            })?;
        let model = Model::load(dir)?;
        let chat_template = ChatTemplate::from_model_dir(dir)?;
        let eos_token_ids = eos_token_ids(dir, &tokenizer)?;
        let defaults = generation_defaults(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            model,
            tokenizer: Arc::new(tokenizer),
            chat_template,
            eos_token_ids,
            defaults,
            load_time: started.elapsed(),
        })
    }
}
