//! The Hugging Face cache (`models--org--name/snapshots/REV/`), as `huggingface_hub` and
//! `corral pull` write it: id `org/name`, at the revision `refs/main` names, else the most
//! recently modified snapshot. A snapshot with `config.json` is a safetensors model; one with
//! `.gguf` files instead holds GGUF models, named as `gguf.rs` says.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::gguf::GgufFolder;
use super::{Kind, ModelEntry, Source, children, kind_of, modified_secs, name_of};

/// The hub cache directory, as `huggingface_hub` finds it: `$HF_HUB_CACHE`, else
/// `<hf_home>/hub`. `env` reads a variable (`std::env::var_os` outside tests); `None` when
/// nothing locates it.
pub fn hub_cache_dir(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    match set(env, "HF_HUB_CACHE") {
        Some(hub) => Some(hub),
        None => hf_home(env).map(|home| home.join("hub")),
    }
}

/// `huggingface_hub`'s home (the token file, and the cache below it): `$HF_HOME`, else
/// `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
pub fn hf_home(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(home) = set(env, "HF_HOME") {
        return Some(home);
    }
    let cache =
        set(env, "XDG_CACHE_HOME").or_else(|| set(env, "HOME").map(|home| home.join(".cache")))?;
    Some(cache.join("huggingface"))
}

fn set(env: &dyn Fn(&str) -> Option<OsString>, name: &str) -> Option<PathBuf> {
    env(name)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}

/// Every model in the hub cache `hub`.
pub(super) fn scan(hub: &Path, source: Source) -> Vec<ModelEntry> {
    children(hub, "the Hugging Face cache")
        .iter()
        .flat_map(|repo| repo_models(repo, source))
        .collect()
}

/// The models of `repo_dir` if it is a model repository (`models--org--name`), else none.
pub(super) fn repo_models(repo_dir: &Path, source: Source) -> Vec<ModelEntry> {
    let Some(id) = repo_id(repo_dir) else {
        return Vec::new();
    };
    let Some(snapshot) = snapshot(repo_dir) else {
        // A download in progress or cancelled: nothing model-shaped yet.
        tracing::debug!(repo = %repo_dir.display(), "no snapshot with a model in it");
        return Vec::new();
    };
    if snapshot.join("config.json").is_file() {
        return vec![ModelEntry::new(id, &snapshot, source)];
    }
    GgufFolder::read(&snapshot).entries(&id, source)
}

/// `models--org--name` → `org/name`; datasets, spaces and anything else → `None`.
fn repo_id(repo_dir: &Path) -> Option<String> {
    let name = name_of(repo_dir)?;
    let repo = name.strip_prefix("models--")?;
    (!repo.is_empty()).then(|| repo.replacen("--", "/", 1))
}

/// The snapshot `refs/main` points at, else the newest one, if it holds a model.
fn snapshot(repo_dir: &Path) -> Option<PathBuf> {
    let snapshots = repo_dir.join("snapshots");
    if let Ok(revision) = std::fs::read_to_string(repo_dir.join("refs/main")) {
        let revision = revision.trim();
        // A revision names a directory here, so it must be a plain name.
        let valid = !revision.is_empty() && revision.chars().all(|c| c.is_ascii_alphanumeric());
        let candidate = snapshots.join(revision);
        if valid && holds_model(&candidate) {
            return Some(candidate);
        }
    }
    if !matches!(kind_of(&snapshots), Kind::Dir) {
        return None;
    }
    children(&snapshots, "a Hugging Face snapshot list")
        .into_iter()
        .filter(|path| holds_model(path))
        .max_by_key(|path| modified_secs(path))
}

fn holds_model(snapshot: &Path) -> bool {
    matches!(kind_of(snapshot), Kind::Dir)
        && (snapshot.join("config.json").is_file() || !GgufFolder::read(snapshot).models.is_empty())
}
