//! Models whose worker found that their files can never load (a missing tensor, an unsupported
//! quantization), though discovery and the description saw nothing wrong: the registry lists
//! them as unservable with the worker's reason, as it does the models `describe` refuses.
//!
//! The verdict is about the files as they were, so it is kept across a rescan only while they
//! stay so: a rescan that finds the model's files changed (a fixed config, a re-downloaded
//! shard) gives it another try. What counts is each file's name, size and modification time,
//! links followed, for a directory its entries (a Hugging Face snapshot's links to blobs) and
//! for a GGUF the file itself.

use std::ffi::OsString;
use std::path::Path;
use std::time::SystemTime;

/// Why a model's files cannot load, and how they looked when its worker said so.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadFailure {
    /// The worker's error, naming the file.
    pub reason: String,
    pub files: FilesStamp,
}

/// Name, size and modification time of each of a model's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesStamp(Vec<(OsString, u64, Option<SystemTime>)>);

impl FilesStamp {
    /// The files at `path` as they are now; an unreadable path stamps empty.
    pub fn of(path: &Path) -> Self {
        let stamp =
            |name: OsString, meta: std::fs::Metadata| (name, meta.len(), meta.modified().ok());
        let Ok(meta) = std::fs::metadata(path) else {
            return FilesStamp(Vec::new());
        };
        if !meta.is_dir() {
            let name = path.file_name().unwrap_or_default().to_owned();
            return FilesStamp(vec![stamp(name, meta)]);
        }
        let mut files: Vec<_> = std::fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                Some(stamp(
                    entry.file_name(),
                    std::fs::metadata(entry.path()).ok()?,
                ))
            })
            .collect();
        files.sort();
        FilesStamp(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directorys_stamp_changes_with_a_files_size_or_a_new_file_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        std::fs::write(dir.path().join("model.safetensors"), "12345678").unwrap();
        let before = FilesStamp::of(dir.path());
        assert_eq!(before.0.len(), 2);
        assert_eq!(FilesStamp::of(dir.path()), before);

        std::fs::write(dir.path().join("config.json"), r#"{"fixed": 1}"#).unwrap();
        let fixed = FilesStamp::of(dir.path());
        assert_ne!(fixed, before);
        std::fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
        assert_ne!(FilesStamp::of(dir.path()), fixed);
    }

    #[test]
    fn a_files_stamp_is_the_file_and_a_missing_path_stamps_empty() {
        let dir = tempfile::tempdir().unwrap();
        let gguf = dir.path().join("tiny.gguf");
        std::fs::write(&gguf, "GGUF").unwrap();
        let before = FilesStamp::of(&gguf);
        assert_eq!(before.0.len(), 1);
        std::fs::write(&gguf, "GGUF and more").unwrap();
        assert_ne!(FilesStamp::of(&gguf), before);
        assert_eq!(FilesStamp::of(&dir.path().join("gone")).0, Vec::new());
    }
}
