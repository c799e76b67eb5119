//! A model's files by name, size and SHA-256, so that a group whose hosts hold different copies
//! is refused before any rank starts. Hashes are kept per file (path, size, modification time),
//! so a model is read once per daemon, not at every start.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelDigest {
    /// Sorted by name.
    files: Vec<FileDigest>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileDigest {
    /// Relative to the model's directory; a GGUF model is its one file.
    name: String,
    bytes: u64,
    sha256: [u8; 32],
}

type CacheKey = (PathBuf, u64, SystemTime);

fn cache() -> &'static Mutex<HashMap<CacheKey, [u8; 32]>> {
    static CACHE: OnceLock<Mutex<HashMap<CacheKey, [u8; 32]>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

impl ModelDigest {
    /// The files of the model at `path` (a directory, or one GGUF file) that loading reads:
    /// every file but hidden ones and documents.
    pub fn of(path: &Path) -> Result<Self> {
        let mut files = Vec::new();
        if path.is_dir() {
            let entries =
                std::fs::read_dir(path).with_context(|| format!("listing {}", path.display()))?;
            for entry in entries {
                let entry = entry.with_context(|| format!("listing {}", path.display()))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let file = entry.path();
                if name.starts_with('.') || name.ends_with(".md") || !file.is_file() {
                    continue;
                }
                files.push(FileDigest::of(&file, name)?);
            }
        } else {
            let name = path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            files.push(FileDigest::of(path, name)?);
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self { files })
    }

    /// How `other` (a host's copy) differs from these files, in words; `None` when it does not.
    pub fn difference(&self, other: &Self) -> Option<String> {
        let find =
            |files: &[FileDigest], name: &str| files.iter().position(|file| file.name == name);
        for file in &self.files {
            match find(&other.files, &file.name).map(|index| &other.files[index]) {
                None => return Some(format!("{} is missing", file.name)),
                Some(theirs) if theirs.bytes != file.bytes => {
                    return Some(format!(
                        "{} is {} bytes, not {}",
                        file.name, theirs.bytes, file.bytes
                    ));
                }
                Some(theirs) if theirs.sha256 != file.sha256 => {
                    return Some(format!("{} has other contents (SHA-256)", file.name));
                }
                Some(_) => {}
            }
        }
        other
            .files
            .iter()
            .find(|file| find(&self.files, &file.name).is_none())
            .map(|file| format!("{} is extra", file.name))
    }
}

impl FileDigest {
    fn of(path: &Path, name: String) -> Result<Self> {
        let metadata =
            std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        let modified = metadata
            .modified()
            .with_context(|| format!("reading {}", path.display()))?;
        let key = (path.to_path_buf(), metadata.len(), modified);
        let known = cache()
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&key)
            .copied();
        let sha256 = match known {
            Some(sha256) => sha256,
            None => {
                let sha256 = hash(path)?;
                cache()
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .insert(key, sha256);
                sha256
            }
        };
        Ok(Self {
            name,
            bytes: metadata.len(),
            sha256,
        })
    }
}

fn hash(path: &Path) -> Result<[u8; 32]> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).with_context(|| format!("reading {}", path.display()))?;
    Ok(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_that_differ_are_told_apart_by_name_size_or_contents() {
        let dir = tempfile::tempdir().unwrap();
        let [ours, theirs] = ["a", "b"].map(|name| {
            let model = dir.path().join(name);
            std::fs::create_dir(&model).unwrap();
            std::fs::write(model.join("config.json"), "{}").unwrap();
            std::fs::write(model.join("model.safetensors"), "weights").unwrap();
            std::fs::write(model.join("README.md"), name).unwrap();
            model
        });
        let digest = |path: &Path| ModelDigest::of(path).unwrap();
        assert_eq!(digest(&ours).difference(&digest(&theirs)), None);
        std::fs::write(theirs.join("model.safetensors"), "weighty").unwrap();
        assert_eq!(
            digest(&ours).difference(&digest(&theirs)).as_deref(),
            Some("model.safetensors has other contents (SHA-256)"),
        );
        std::fs::write(theirs.join("model.safetensors"), "weight").unwrap();
        assert_eq!(
            digest(&ours).difference(&digest(&theirs)).as_deref(),
            Some("model.safetensors is 6 bytes, not 7"),
        );
        std::fs::remove_file(theirs.join("model.safetensors")).unwrap();
        assert_eq!(
            digest(&ours).difference(&digest(&theirs)).as_deref(),
            Some("model.safetensors is missing"),
        );
    }
}
