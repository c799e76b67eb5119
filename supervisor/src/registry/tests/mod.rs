//! Fake layouts of each source in temporary directories; nothing here reads the real home.

mod huggingface;
mod lmstudio;
mod models_dir;
mod ollama;
mod scan;

use std::path::Path;

use super::ModelEntry;

/// A safetensors model directory: `config.json` is what discovery looks for.
fn model_at(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), "{}").unwrap();
}

/// A file that starts like a GGUF.
fn gguf_at(file: &Path) {
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, b"GGUF\x03\0\0\0").unwrap();
}

fn ids(entries: &[ModelEntry]) -> Vec<&str> {
    entries.iter().map(|entry| entry.id.as_str()).collect()
}

fn find<'a>(entries: &'a [ModelEntry], id: &str) -> &'a ModelEntry {
    entries
        .iter()
        .find(|entry| entry.id == id)
        .unwrap_or_else(|| panic!("no {id} in {entries:#?}"))
}
