//! The models corral can serve: found where people already keep them, described by the worker,
//! plus aliases.
//!
//! A model's id comes from the files' layout, never the other way round: a request's model name
//! is only ever looked up here, so it cannot become a path.
//!
//! Sources, in the order that decides which of two models with one id is kept (the first, with a
//! warning naming both paths): the `--model` flag, the models directories (`models_dir.rs`), the
//! Hugging Face cache (`huggingface.rs`), LM Studio's folder (`lmstudio.rs`), Ollama's library
//! (`ollama.rs`); `sources.rs` locates them. A folder of `.gguf` files is named by `gguf.rs`. What
//! a model's files hold, and whether a worker can serve them, is the worker's call
//! (`describe.rs`), or, for files only loading finds wrong, its worker's when it fails to load
//! them (`unloadable.rs`). `shared.rs` holds the current registry and scans again on request.

mod describe;
mod gguf;
mod huggingface;
mod lmstudio;
mod models_dir;
mod ollama;
mod ollama_params;
mod shared;
mod sources;
mod unloadable;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use corral_ipc::{ModelDescription, ModelKind, SamplingValues};
use serde::Serialize;

pub use huggingface::{hf_home, hub_cache_dir};
pub use shared::{Catalog, Fallback, SharedRegistry};
pub use sources::Sources;
use unloadable::LoadFailure;

/// Where a model was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// `corral serve --model PATH`.
    ModelFlag,
    ModelsDir,
    #[serde(rename = "huggingface")]
    HuggingFace,
    #[serde(rename = "lmstudio")]
    LmStudio,
    Ollama,
    /// The generated model served when nothing else was found.
    Default,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelEntry {
    pub id: String,
    /// A model directory, or one GGUF file (an Ollama blob, which has no `.gguf` extension); the
    /// worker's `--model` takes either.
    pub path: PathBuf,
    pub source: Source,
    /// Unix seconds of the path's modification time (`created` in `/v1/models`).
    pub created: u64,
    /// Why discovery already knows the model cannot be served (a blob that is missing or not a
    /// GGUF, a vision projector, a broken link), before any worker looks at it.
    pub problem: Option<String>,
    /// What the worker made of the files; `None` until described, or when describing failed
    /// (the model is then assumed servable, and its worker says otherwise when it starts).
    pub description: Option<ModelDescription>,
    /// The sampling defaults of an Ollama model's params layer; empty for other sources.
    pub ollama_params: SamplingValues,
    /// A GGUF model's vision projector (llama.cpp's `mmproj` file beside it, or an Ollama
    /// model's projector layer), which its worker loads with it (`--mmproj`).
    pub projector: Option<PathBuf>,
    /// Why its worker could not load it, though the description found nothing wrong; set by
    /// `SharedRegistry::mark_unloadable`.
    pub load_failure: Option<LoadFailure>,
}

impl ModelEntry {
    /// A model found at `path`, not yet described.
    pub fn new(id: String, path: &Path, source: Source) -> Self {
        ModelEntry {
            id,
            path: path.to_path_buf(),
            source,
            created: modified_secs(path),
            problem: None,
            description: None,
            ollama_params: SamplingValues::default(),
            projector: None,
            load_failure: None,
        }
    }

    /// The same, already known to be unservable for `problem`.
    pub fn unservable(id: String, path: &Path, source: Source, problem: String) -> Self {
        ModelEntry {
            problem: Some(problem),
            ..ModelEntry::new(id, path, source)
        }
    }

    /// Why this model cannot be served: from discovery, the worker's description, or its
    /// worker's failure to load it.
    pub fn unservable_reason(&self) -> Option<&str> {
        self.problem
            .as_deref()
            .or_else(|| {
                self.description
                    .as_ref()
                    .and_then(|description| description.unservable.as_deref())
            })
            .or_else(|| {
                self.load_failure
                    .as_ref()
                    .map(|failure| failure.reason.as_str())
            })
    }

    pub fn is_servable(&self) -> bool {
        self.unservable_reason().is_none()
    }

    /// What the model answers, as the worker described it; an undescribed model counts as a
    /// chat model (its worker refuses what it cannot do).
    pub fn kind(&self) -> ModelKind {
        self.description
            .as_ref()
            .map_or(ModelKind::Chat, |description| description.kind)
    }

    /// Whether the model reads images (its worker runs its vision tower).
    pub fn vision(&self) -> bool {
        self.description
            .as_ref()
            .is_some_and(|description| description.vision)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Registry {
    models: BTreeMap<String, ModelEntry>,
    aliases: BTreeMap<String, String>,
    /// Aliases with `*` wildcards (`claude-*`), for clients that pick their own model names:
    /// Claude Code asks for `claude-sonnet-4-5-20250929` and, for small tasks, a haiku.
    patterns: Vec<(String, String)>,
}

impl Registry {
    /// Adds `entry` unless its id is taken: the first of two models with one id wins.
    pub fn add(&mut self, entry: ModelEntry) {
        if let Some(existing) = self.models.get(&entry.id) {
            // The same files reached twice (a models directory that is also the HF cache).
            if existing.path != entry.path {
                tracing::warn!(
                    model = %entry.id,
                    kept = %existing.path.display(),
                    ignored = %entry.path.display(),
                    "two models with one id; the first source wins"
                );
            }
            return;
        }
        self.models.insert(entry.id.clone(), entry);
    }

    /// Adds `alias` for the model `target`; an alias of an unknown model is logged and dropped.
    /// An alias with `*` is a pattern, each `*` standing for any run of characters.
    pub fn alias(&mut self, alias: &str, target: &str) {
        match self.resolve(target) {
            Some(id) if alias.contains('*') => {
                let id = id.to_owned();
                self.patterns.push((alias.to_owned(), id));
                // The most specific pattern first: `claude-haiku-*` before `claude-*`.
                self.patterns
                    .sort_by_key(|(pattern, _)| std::cmp::Reverse(literal_len(pattern)));
            }
            Some(id) => {
                self.aliases.insert(alias.to_owned(), id.to_owned());
            }
            None => tracing::warn!(alias, target, "alias of an unknown model ignored"),
        }
    }

    /// The canonical id for an id, an alias, or a name an alias pattern matches (the pattern
    /// with the most literal characters wins).
    pub fn resolve(&self, name: &str) -> Option<&str> {
        if let Some((id, _)) = self.models.get_key_value(name) {
            return Some(id);
        }
        if let Some(id) = self.aliases.get(name) {
            return Some(id);
        }
        self.patterns
            .iter()
            .find(|(pattern, _)| glob_matches(pattern, name))
            .map(|(_, id)| id.as_str())
    }

    pub fn get(&self, id: &str) -> Option<&ModelEntry> {
        self.models.get(id)
    }

    /// Every model, servable or not, by id.
    pub fn entries(&self) -> impl Iterator<Item = &ModelEntry> {
        self.models.values()
    }

    /// The path a worker for `id` loads; or why none does: `id` is unservable, or no model.
    pub fn servable_path(&self, id: &str) -> Result<&Path, String> {
        let entry = self
            .get(id)
            .ok_or_else(|| format!("no model `{id}` is listed (any more)"))?;
        match entry.unservable_reason() {
            Some(reason) => Err(reason.to_owned()),
            None => Ok(&entry.path),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }
}

/// A file or directory name that may name a model: UTF-8, not hidden.
fn name_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    (!name.starts_with('.')).then(|| name.to_owned())
}

fn modified_secs(path: &Path) -> u64 {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |age| age.as_secs())
}

/// What a path found while scanning is.
#[derive(Debug)]
enum Kind {
    Dir,
    File,
    /// A symbolic link whose target does not exist: reported, never followed.
    BrokenLink(PathBuf),
    /// Gone, or something else (a socket, a device).
    Other,
}

fn kind_of(path: &Path) -> Kind {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Kind::Dir,
        Ok(meta) if meta.is_file() => Kind::File,
        Ok(_) => Kind::Other,
        Err(_) => match std::fs::read_link(path) {
            Ok(target) => Kind::BrokenLink(target),
            Err(_) => Kind::Other,
        },
    }
}

/// The entry for a broken link where a model was expected, with a warning naming it.
fn broken_link(id: String, path: &Path, target: &Path, source: Source) -> ModelEntry {
    tracing::warn!(path = %path.display(), target = %target.display(), model = %id, "a model is a broken symbolic link");
    ModelEntry::unservable(
        id,
        path,
        source,
        format!(
            "{} is a broken symbolic link (to {})",
            path.display(),
            target.display()
        ),
    )
}

/// The readable children of `dir`, sorted by name; an unreadable directory is a warning naming it.
fn children(dir: &Path, what: &str) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            let mut paths: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
            paths.sort();
            paths
        }
        Err(error) => {
            tracing::warn!(dir = %dir.display(), %error, "cannot read {what}");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests;

fn literal_len(pattern: &str) -> usize {
    pattern.chars().filter(|&c| c != '*').count()
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters (none included).
fn glob_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else {
        return false;
    };
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*` at all: an exact match.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}
