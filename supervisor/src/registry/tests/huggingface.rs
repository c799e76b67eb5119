use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::super::Source;
use super::super::huggingface::{hub_cache_dir, scan};
use super::{find, gguf_at, ids, model_at};

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + use<> {
    let vars: HashMap<String, OsString> = vars
        .iter()
        .map(|(name, value)| ((*name).to_owned(), OsString::from(value)))
        .collect();
    move |name| vars.get(name).cloned()
}

#[test]
fn the_cache_is_where_huggingface_hub_puts_it() {
    let hub = |vars: &[(&str, &str)]| hub_cache_dir(&env(vars));
    assert_eq!(
        hub(&[
            ("HF_HUB_CACHE", "/c/hub"),
            ("HF_HOME", "/h"),
            ("HOME", "/u")
        ]),
        Some(PathBuf::from("/c/hub"))
    );
    assert_eq!(
        hub(&[("HF_HOME", "/h"), ("HOME", "/u")]),
        Some(PathBuf::from("/h/hub"))
    );
    assert_eq!(
        hub(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/u")]),
        Some(PathBuf::from("/x/huggingface/hub"))
    );
    assert_eq!(
        hub(&[("HF_HOME", ""), ("HOME", "/u")]),
        Some(PathBuf::from("/u/.cache/huggingface/hub"))
    );
    assert_eq!(hub(&[]), None);
}

/// A cache repository whose snapshot `rev` links `files` to blobs, as `huggingface_hub` does.
fn cached_repo(hub: &Path, repo: &str, rev: &str, files: &[&str]) -> PathBuf {
    let repo_dir = hub.join(format!("models--{}", repo.replacen('/', "--", 1)));
    let snapshot = repo_dir.join("snapshots").join(rev);
    std::fs::create_dir_all(&snapshot).unwrap();
    for (index, file) in files.iter().enumerate() {
        let blob = repo_dir.join(format!("blobs/{rev}{index}"));
        gguf_at(&blob);
        symlink(&blob, snapshot.join(file)).unwrap();
    }
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::write(repo_dir.join("refs/main"), rev).unwrap();
    snapshot
}

#[test]
fn a_snapshot_of_gguf_files_holds_one_model_per_file() {
    let root = tempfile::tempdir().unwrap();
    let hub = root.path();
    let single = cached_repo(hub, "HuggingFaceTB/SmolLM2-GGUF", "a1", &["smol.Q4_1.gguf"]);
    cached_repo(
        hub,
        "bartowski/Llama-GGUF",
        "b2",
        &["Llama-Q4_K_M.gguf", "Llama-Q8_0.gguf"],
    );
    model_at(&hub.join("models--mlx-community--Qwen3/snapshots/c3"));
    // Not models: a dataset, and a download with no snapshot yet.
    model_at(&hub.join("datasets--org--data/snapshots/d4"));
    std::fs::create_dir_all(hub.join("models--org--partial/blobs")).unwrap();

    let found = scan(hub, Source::HuggingFace);
    assert_eq!(
        ids(&found),
        [
            "HuggingFaceTB/SmolLM2-GGUF",
            "bartowski/Llama-GGUF:Q4_K_M",
            "bartowski/Llama-GGUF:Q8_0",
            "mlx-community/Qwen3",
        ]
    );
    assert_eq!(
        find(&found, "HuggingFaceTB/SmolLM2-GGUF").path,
        single.join("smol.Q4_1.gguf")
    );
    assert!(found.iter().all(|entry| entry.is_servable()));
    assert!(
        found
            .iter()
            .all(|entry| entry.source == Source::HuggingFace)
    );
}

#[test]
fn a_gguf_whose_blob_is_gone_is_unservable() {
    let root = tempfile::tempdir().unwrap();
    let snapshot = cached_repo(root.path(), "org/m", "e5", &["m.gguf"]);
    std::fs::remove_file(std::fs::read_link(snapshot.join("m.gguf")).unwrap()).unwrap();
    let found = scan(root.path(), Source::HuggingFace);
    let reason = find(&found, "org/m").unservable_reason().unwrap();
    assert!(reason.contains("broken symbolic link"), "{reason}");
}
