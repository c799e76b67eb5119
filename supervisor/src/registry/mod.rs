//! The models corral can serve, found by scanning model directories, plus aliases.
//!
//! A model's id comes from the directory layout, never the other way round: a request's model
//! name is only ever looked up here, so it cannot become a path.
//!
//! Layouts understood, for each configured directory:
//! - the directory itself is a model (it holds `config.json`): id = its name;
//! - each subdirectory holding `config.json` is a model: id = the subdirectory's name;
//! - the Hugging Face cache (`models--org--name/snapshots/REV/`): id = `org/name`, at the
//!   revision `refs/main` names, else the most recently modified snapshot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelEntry {
    pub id: String,
    pub dir: PathBuf,
    /// Unix seconds of the directory's modification time (`created` in `/v1/models`).
    pub created: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Registry {
    models: BTreeMap<String, ModelEntry>,
    aliases: BTreeMap<String, String>,
}

impl Registry {
    /// Scans `dirs`; an unreadable directory is logged and skipped, the first of two models with
    /// the same id wins.
    pub fn scan(dirs: &[PathBuf]) -> Self {
        let mut registry = Self::default();
        for dir in dirs {
            for entry in models_in(dir) {
                registry.add(entry);
            }
        }
        registry
    }

    pub fn add(&mut self, entry: ModelEntry) {
        if let Some(existing) = self.models.get(&entry.id) {
            tracing::warn!(model = %entry.id, kept = %existing.dir.display(), ignored = %entry.dir.display(), "two models with one id");
            return;
        }
        self.models.insert(entry.id.clone(), entry);
    }

    /// Adds `alias` for the model `target`; an alias of an unknown model is logged and dropped.
    pub fn alias(&mut self, alias: &str, target: &str) {
        match self.resolve(target) {
            Some(id) => {
                self.aliases.insert(alias.to_owned(), id.to_owned());
            }
            None => tracing::warn!(alias, target, "alias of an unknown model ignored"),
        }
    }

    /// The canonical id for an id or alias.
    pub fn resolve(&self, name: &str) -> Option<&str> {
        if let Some((id, _)) = self.models.get_key_value(name) {
            return Some(id);
        }
        self.aliases.get(name).map(String::as_str)
    }

    pub fn get(&self, id: &str) -> Option<&ModelEntry> {
        self.models.get(id)
    }

    pub fn entries(&self) -> impl Iterator<Item = &ModelEntry> {
        self.models.values()
    }

    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }
}

fn models_in(dir: &Path) -> Vec<ModelEntry> {
    if is_model(dir) {
        return name_of(dir).map(|id| entry(id, dir)).into_iter().collect();
    }
    let children = match std::fs::read_dir(dir) {
        Ok(children) => children,
        Err(error) => {
            tracing::warn!(dir = %dir.display(), %error, "cannot read models directory");
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for child in children.flatten() {
        let path = child.path();
        let Some(name) = name_of(&path) else { continue };
        if let Some(repo) = name.strip_prefix("models--") {
            if let Some(snapshot) = hub_snapshot(&path) {
                found.push(entry(repo.replacen("--", "/", 1), &snapshot));
            }
        } else if is_model(&path) {
            found.push(entry(name, &path));
        }
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    found
}

/// The snapshot `refs/main` points at, else the newest one.
fn hub_snapshot(repo_dir: &Path) -> Option<PathBuf> {
    let snapshots = repo_dir.join("snapshots");
    if let Ok(revision) = std::fs::read_to_string(repo_dir.join("refs/main")) {
        let revision = revision.trim();
        let valid = !revision.is_empty() && revision.chars().all(|c| c.is_ascii_alphanumeric());
        let candidate = snapshots.join(revision);
        if valid && is_model(&candidate) {
            return Some(candidate);
        }
    }
    std::fs::read_dir(&snapshots)
        .ok()?
        .flatten()
        .map(|snapshot| snapshot.path())
        .filter(|path| is_model(path))
        .max_by_key(|path| modified_secs(path))
}

fn is_model(dir: &Path) -> bool {
    dir.join("config.json").is_file()
}

fn name_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    (!name.starts_with('.')).then(|| name.to_owned())
}

fn entry(id: String, dir: &Path) -> ModelEntry {
    ModelEntry {
        id,
        dir: dir.to_path_buf(),
        created: modified_secs(dir),
    }
}

fn modified_secs(path: &Path) -> u64 {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |age| age.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_at(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("config.json"), "{}").unwrap();
    }

    #[test]
    fn finds_plain_folders_hub_cache_and_a_model_directory_itself() {
        let root = tempfile::tempdir().unwrap();
        model_at(&root.path().join("plain/llama-tiny"));
        std::fs::create_dir_all(root.path().join("plain/not-a-model")).unwrap();
        let hub = root
            .path()
            .join("hub/models--mlx-community--Qwen3-0.6B-4bit");
        model_at(&hub.join("snapshots/aaa"));
        model_at(&hub.join("snapshots/bbb"));
        std::fs::create_dir_all(hub.join("refs")).unwrap();
        std::fs::write(hub.join("refs/main"), "aaa\n").unwrap();
        model_at(&root.path().join("single"));

        let registry = Registry::scan(&[
            root.path().join("plain"),
            root.path().join("hub"),
            root.path().join("single"),
        ]);
        let ids: Vec<&str> = registry.entries().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            ["llama-tiny", "mlx-community/Qwen3-0.6B-4bit", "single"]
        );
        let qwen = registry.get("mlx-community/Qwen3-0.6B-4bit").unwrap();
        assert!(qwen.dir.ends_with("snapshots/aaa"));
    }

    #[test]
    fn aliases_resolve_and_unknown_names_do_not() {
        let root = tempfile::tempdir().unwrap();
        model_at(&root.path().join("m/llama-tiny"));
        let mut registry = Registry::scan(&[root.path().join("m")]);
        registry.alias("default", "llama-tiny");
        registry.alias("ghost", "no-such-model");
        assert_eq!(registry.resolve("default"), Some("llama-tiny"));
        assert_eq!(registry.resolve("llama-tiny"), Some("llama-tiny"));
        assert_eq!(registry.resolve("ghost"), None);
        assert_eq!(registry.resolve("../../etc/passwd"), None);
    }

    #[test]
    fn a_missing_directory_is_skipped() {
        let registry = Registry::scan(&[PathBuf::from("/nonexistent/corral-models")]);
        assert!(registry.is_empty());
    }
}
