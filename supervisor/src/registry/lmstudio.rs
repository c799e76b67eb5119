//! LM Studio's folder (`~/.lmstudio/models/<publisher>/<repo>/`): a repo folder with
//! `config.json` is an MLX model, id `publisher/repo`; one with `.gguf` files holds GGUF models,
//! named after `publisher/repo` as `gguf.rs` says. A repo folder that cannot be read, or is a
//! broken link, is listed as unservable.

use std::path::{Path, PathBuf};

use super::gguf::GgufFolder;
use super::{Kind, ModelEntry, Source, broken_link, children, kind_of, name_of};

/// `~/.lmstudio/models`, where LM Studio keeps downloads unless told otherwise.
pub(super) fn default_dir(home: &Path) -> PathBuf {
    home.join(".lmstudio/models")
}

pub(super) fn scan(root: &Path) -> Vec<ModelEntry> {
    let mut found = Vec::new();
    for publisher in children(root, "LM Studio's models folder") {
        let Some(publisher_name) = name_of(&publisher) else {
            continue;
        };
        if !matches!(kind_of(&publisher), Kind::Dir) {
            continue;
        }
        for repo in children(&publisher, "an LM Studio publisher folder") {
            let Some(repo_name) = name_of(&repo) else {
                continue;
            };
            let id = format!("{publisher_name}/{repo_name}");
            found.extend(repo_models(&repo, id));
        }
    }
    found
}

fn repo_models(repo: &Path, id: String) -> Vec<ModelEntry> {
    let source = Source::LmStudio;
    match kind_of(repo) {
        Kind::Dir => {}
        Kind::BrokenLink(target) => return vec![broken_link(id, repo, &target, source)],
        Kind::File | Kind::Other => return Vec::new(),
    }
    if repo.join("config.json").is_file() {
        return vec![ModelEntry::new(id, repo, source)];
    }
    if let Err(error) = std::fs::read_dir(repo) {
        tracing::warn!(dir = %repo.display(), %error, "cannot read an LM Studio model folder");
        let problem = format!("cannot read {}: {error}", repo.display());
        return vec![ModelEntry::unservable(id, repo, source, problem)];
    }
    GgufFolder::read(repo).entries(&id, source)
}
