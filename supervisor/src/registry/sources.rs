//! Where models are looked for, located once from the configuration and the environment, and the
//! scan over them in the order that decides collisions.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use super::{Kind, ModelEntry, Source, gguf, huggingface, kind_of, lmstudio, models_dir, ollama};
use crate::config::Config;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    /// `corral serve --model PATH`: a model directory or a `.gguf` file.
    pub model_flag: Option<PathBuf>,
    pub models_dirs: Vec<PathBuf>,
    /// The Hugging Face hub cache, unless discovery of it is off.
    pub huggingface: Option<PathBuf>,
    pub lmstudio: Option<PathBuf>,
    pub ollama: Option<PathBuf>,
}

impl Sources {
    /// The sources `config` turns on, located through `env` (`std::env::var_os` outside tests):
    /// `HF_HUB_CACHE` / `HF_HOME` / `XDG_CACHE_HOME`, `OLLAMA_MODELS`, and `HOME` for the
    /// defaults. A source that does not exist is simply empty; a `--model` path without a
    /// usable name is an error.
    pub fn locate(
        config: &Config,
        model_flag: Option<PathBuf>,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<Self> {
        if let Some(path) = &model_flag
            && flag_model_id(path).is_none()
        {
            bail!("--model {} has no usable name", path.display());
        }
        let discovery = &config.discovery;
        let home = env("HOME")
            .filter(|home| !home.is_empty())
            .map(PathBuf::from);
        let ollama = env("OLLAMA_MODELS")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.as_deref().map(ollama::default_dir));
        Ok(Sources {
            model_flag,
            models_dirs: config.models_dirs.clone(),
            huggingface: huggingface::hub_cache_dir(env).filter(|_| discovery.huggingface),
            lmstudio: home
                .as_deref()
                .map(lmstudio::default_dir)
                .filter(|_| discovery.lmstudio),
            ollama: ollama.filter(|_| discovery.ollama),
        })
    }

    /// Every model found, in the order of precedence: `--model`, the models directories, the
    /// Hugging Face cache, LM Studio, Ollama. Sources that do not exist are skipped quietly.
    pub fn scan(&self) -> Vec<ModelEntry> {
        let mut found = Vec::new();
        if let Some(path) = &self.model_flag
            && let Some(id) = flag_model_id(path)
        {
            found.push(ModelEntry::new(id, path, Source::ModelFlag));
        }
        for dir in &self.models_dirs {
            found.extend(models_dir::scan(dir));
        }
        let present = |dir: &Option<PathBuf>| {
            dir.as_ref()
                .filter(|dir| !matches!(kind_of(dir), Kind::Other))
                .cloned()
        };
        if let Some(hub) = present(&self.huggingface) {
            found.extend(huggingface::scan(&hub, Source::HuggingFace));
        }
        if let Some(root) = present(&self.lmstudio) {
            found.extend(lmstudio::scan(&root));
        }
        if let Some(root) = present(&self.ollama) {
            found.extend(ollama::scan(&root));
        }
        found
    }
}

/// `--model PATH`: the directory's name, or the `.gguf` file's stem. The worker decides whether
/// the files are a model.
fn flag_model_id(path: &Path) -> Option<String> {
    gguf::gguf_stem(path).or_else(|| path.file_name()?.to_str().map(str::to_owned))
}
