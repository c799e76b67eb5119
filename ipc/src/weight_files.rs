//! Which `*.safetensors` files of a model directory hold its checkpoint. The worker loads them,
//! describes them, and the supervisor sizes its memory estimate by them, so all three agree.
//!
//! A directory often holds more than the checkpoint: Mistral's releases put the same weights
//! twice, as `consolidated.safetensors` (Mistral's own names) beside the Hugging Face shards, and
//! a directory may keep other tensors (reference outputs, adapters). Like mlx-lm and
//! transformers, the shards `model.safetensors.index.json` lists are the checkpoint when it is
//! there, else the `model*.safetensors` files, else whatever `*.safetensors` the directory has.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub const INDEX_FILE: &str = "model.safetensors.index.json";

#[derive(Deserialize)]
struct Index {
    weight_map: std::collections::HashMap<String, String>,
}

/// The checkpoint's files in `model_dir`, sorted; empty when it has none. Errors name the
/// directory or the index, and an index naming a shard that is not there is an error.
pub fn weight_files(model_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let index_path = model_dir.join(INDEX_FILE);
    if index_path.is_file() {
        return indexed_files(model_dir, &index_path);
    }
    let context = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", model_dir.display()));
    let mut all = Vec::new();
    for entry in std::fs::read_dir(model_dir).map_err(context)? {
        let path = entry.map_err(context)?.path();
        if path.extension().is_some_and(|ext| ext == "safetensors") {
            all.push(path);
        }
    }
    all.sort();
    let named_model: Vec<PathBuf> = all
        .iter()
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("model"))
        })
        .cloned()
        .collect();
    Ok(if named_model.is_empty() {
        all
    } else {
        named_model
    })
}

fn indexed_files(model_dir: &Path, index_path: &Path) -> io::Result<Vec<PathBuf>> {
    let invalid = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {what}", index_path.display()),
        )
    };
    let text = std::fs::read_to_string(index_path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", index_path.display())))?;
    let index: Index = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let shards: BTreeSet<&str> = index.weight_map.values().map(String::as_str).collect();
    let mut files = Vec::with_capacity(shards.len());
    for shard in shards {
        // A shard is a file beside the index, never a path elsewhere.
        if shard.contains('/') || shard.contains('\\') || shard == ".." {
            return Err(invalid(format!("shard {shard:?} is not a file name")));
        }
        let path = model_dir.join(shard);
        if !path.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{}: lists {shard}, which {} does not hold",
                    index_path.display(),
                    model_dir.display()
                ),
            ));
        }
        files.push(path);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for name in files {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        dir
    }

    fn names(files: Vec<PathBuf>) -> Vec<String> {
        files
            .iter()
            .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_index_lists_the_shards_and_consolidated_weights_beside_them_are_ignored() {
        let dir = dir_with(&[
            "consolidated.safetensors",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ]);
        let index = serde_json::json!({"metadata": {}, "weight_map": {
            "a": "model-00002-of-00002.safetensors",
            "b": "model-00001-of-00002.safetensors",
            "c": "model-00001-of-00002.safetensors",
        }});
        std::fs::write(dir.path().join(INDEX_FILE), index.to_string()).unwrap();
        assert_eq!(
            names(weight_files(dir.path()).unwrap()),
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"
            ]
        );
    }

    #[test]
    fn without_an_index_model_files_are_the_checkpoint_and_other_tensors_are_not() {
        let dir = dir_with(&["model.safetensors", "reference.safetensors"]);
        assert_eq!(
            names(weight_files(dir.path()).unwrap()),
            ["model.safetensors"]
        );
        let mistral = dir_with(&[
            "consolidated.safetensors",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ]);
        assert_eq!(
            names(weight_files(mistral.path()).unwrap()),
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"
            ]
        );
    }

    #[test]
    fn a_directory_without_model_files_offers_all_its_safetensors() {
        let dir = dir_with(&["weights.00.safetensors", "weights.01.safetensors", "a.txt"]);
        assert_eq!(
            names(weight_files(dir.path()).unwrap()),
            ["weights.00.safetensors", "weights.01.safetensors"]
        );
        assert!(weight_files(dir_with(&[]).path()).unwrap().is_empty());
    }

    #[test]
    fn an_index_naming_a_missing_shard_is_an_error_naming_it() {
        let dir = dir_with(&["model-00001-of-00002.safetensors"]);
        let index = serde_json::json!({"weight_map": {
            "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
        }});
        std::fs::write(dir.path().join(INDEX_FILE), index.to_string()).unwrap();
        let error = weight_files(dir.path()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert!(
            error
                .to_string()
                .contains("model-00002-of-00002.safetensors"),
            "{error}"
        );
    }
}
