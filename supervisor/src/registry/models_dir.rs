//! A `--models-dir`. Layouts understood:
//! - the directory itself is a model (it holds `config.json`): id = its name;
//! - each subdirectory holding `config.json` is a model: id = the subdirectory's name;
//! - each subdirectory holding `.gguf` files and no `config.json` holds GGUF models, named after
//!   the subdirectory as `gguf.rs` says;
//! - each `.gguf` file directly in the directory is a model: id = the file's stem;
//! - a Hugging Face cache (`models--org--name/...`, see `huggingface.rs`).
//!
//! A broken symbolic link in the directory is listed as an unservable model, with a warning.

use std::path::Path;

use super::gguf::{GgufFolder, gguf_stem};
use super::{Kind, ModelEntry, Source, broken_link, children, huggingface, kind_of, name_of};

pub(super) fn scan(dir: &Path) -> Vec<ModelEntry> {
    let source = Source::ModelsDir;
    match kind_of(dir) {
        Kind::Dir => {}
        Kind::BrokenLink(target) => {
            tracing::warn!(dir = %dir.display(), target = %target.display(), "the models directory is a broken symbolic link");
            return Vec::new();
        }
        Kind::File | Kind::Other => {
            tracing::warn!(dir = %dir.display(), "the models directory is not a directory");
            return Vec::new();
        }
    }
    if dir.join("config.json").is_file() {
        return name_of(dir)
            .map(|id| ModelEntry::new(id, dir, source))
            .into_iter()
            .collect();
    }
    let files = GgufFolder::read(dir);
    let mut found: Vec<ModelEntry> = files
        .models
        .iter()
        .map(|file| files.entry(file, file.stem.clone(), source))
        .collect();
    for child in children(dir, "models directory") {
        let Some(name) = name_of(&child) else {
            continue;
        };
        if name.starts_with("models--") {
            found.extend(huggingface::repo_models(&child, source));
            continue;
        }
        match kind_of(&child) {
            Kind::Dir if child.join("config.json").is_file() => {
                found.push(ModelEntry::new(name, &child, source));
            }
            Kind::Dir => found.extend(GgufFolder::read(&child).entries(&name, source)),
            // Broken `.gguf` links came with the folder's own files above.
            Kind::BrokenLink(target) if gguf_stem(&child).is_none() => {
                found.push(broken_link(name, &child, &target, source));
            }
            _ => {}
        }
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    found
}
