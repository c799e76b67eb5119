use std::path::{Path, PathBuf};

use serde_json::json;

use super::super::Source;
use super::super::ollama::scan;
use super::{find, gguf_at, ids};

const MODEL: &str = "application/vnd.ollama.image.model";

/// A 64-digit hex digest made of one repeated digit.
fn hex(digit: char) -> String {
    std::iter::repeat_n(digit, 64).collect()
}

/// Writes the manifest `registry/namespace/name/tag` with `layers` (media type, digest).
fn manifest(root: &Path, path: &str, layers: &[(&str, String)]) -> PathBuf {
    let layers: Vec<_> = layers
        .iter()
        .map(|(media_type, digest)| json!({"mediaType": media_type, "digest": digest, "size": 8}))
        .collect();
    let body = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": format!("sha256:{}", hex('c')), "size": 8},
        "layers": layers,
    });
    let file = root.join("manifests").join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, body.to_string()).unwrap();
    file
}

fn blob(root: &Path, digit: char) -> PathBuf {
    root.join("blobs").join(format!("sha256-{}", hex(digit)))
}

/// A library with one servable model in each naming case.
fn library(root: &Path) {
    for digit in ['1', '2', '3'] {
        gguf_at(&blob(root, digit));
    }
    let template = (
        "application/vnd.ollama.image.template",
        format!("sha256:{}", hex('9')),
    );
    manifest(
        root,
        "registry.ollama.ai/library/llama3.2/latest",
        &[(MODEL, format!("sha256:{}", hex('1'))), template.clone()],
    );
    manifest(
        root,
        "registry.ollama.ai/jmorgan/tiny/q8",
        &[(MODEL, format!("sha256:{}", hex('2')))],
    );
    manifest(
        root,
        "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF/Q4_K_M",
        &[(MODEL, format!("sha256:{}", hex('3'))), template],
    );
}

#[test]
fn manifests_name_their_gguf_blobs() {
    let root = tempfile::tempdir().unwrap();
    library(root.path());
    let found = scan(root.path());
    assert_eq!(
        ids(&found),
        [
            "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
            "jmorgan/tiny:q8",
            "llama3.2:latest",
        ]
    );
    assert_eq!(find(&found, "llama3.2:latest").path, blob(root.path(), '1'));
    assert_eq!(find(&found, "jmorgan/tiny:q8").path, blob(root.path(), '2'));
    assert!(found.iter().all(|entry| entry.is_servable()));
    assert!(found.iter().all(|entry| entry.source == Source::Ollama));
}

#[test]
fn a_missing_blob_a_foreign_blob_and_a_missing_projector_are_unservable_with_the_reason() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let library = "registry.ollama.ai/library";
    manifest(
        root,
        &format!("{library}/gone/1b"),
        &[(MODEL, format!("sha256:{}", hex('4')))],
    );
    std::fs::create_dir_all(root.join("blobs")).unwrap();
    std::fs::write(blob(root, '5'), b"PK\x03\x04 a zip, not a GGUF").unwrap();
    manifest(
        root,
        &format!("{library}/zip/1b"),
        &[(MODEL, format!("sha256:{}", hex('5')))],
    );
    gguf_at(&blob(root, '6'));
    let projector = (
        "application/vnd.ollama.image.projector",
        format!("sha256:{}", hex('7')),
    );
    manifest(
        root,
        &format!("{library}/llava/7b"),
        &[(MODEL, format!("sha256:{}", hex('6'))), projector],
    );

    let found = scan(root);
    assert_eq!(ids(&found), ["gone:1b", "llava:7b", "zip:1b"]);
    let reason = |id| find(&found, id).unservable_reason().unwrap().to_owned();
    let gone = reason("gone:1b");
    assert!(
        gone.contains("missing") && gone.contains(&hex('4')),
        "{gone}"
    );
    let zip = reason("zip:1b");
    assert!(zip.contains("not a GGUF"), "{zip}");
    assert_eq!(find(&found, "zip:1b").path, blob(root, '5'));
    // The projector's blob is missing.
    let llava = reason("llava:7b");
    assert!(
        llava.contains("missing") && llava.contains(&hex('7')),
        "{llava}"
    );
}

#[test]
fn a_projector_layer_is_the_models_vision_projector() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    gguf_at(&blob(root, '6'));
    gguf_at(&blob(root, '7'));
    let projector = (
        "application/vnd.ollama.image.projector",
        format!("sha256:{}", hex('7')),
    );
    manifest(
        root,
        "registry.ollama.ai/library/qwen3.5/9b",
        &[(MODEL, format!("sha256:{}", hex('6'))), projector],
    );
    let found = scan(root);
    let vision = find(&found, "qwen3.5:9b");
    assert!(vision.is_servable(), "{vision:?}");
    assert_eq!(vision.path, blob(root, '6'));
    assert_eq!(vision.projector.as_deref(), Some(blob(root, '7').as_path()));
}

#[test]
fn garbage_manifests_and_digests_that_are_not_sha256_never_become_paths() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let library = root.join("manifests/registry.ollama.ai/library");
    std::fs::create_dir_all(library.join("garbage")).unwrap();
    std::fs::write(library.join("garbage/latest"), b"\xff\x00 not json").unwrap();
    manifest(
        root,
        "registry.ollama.ai/library/escape/latest",
        &[(MODEL, "sha256:../../../../etc/passwd".to_owned())],
    );
    manifest(
        root,
        "registry.ollama.ai/library/empty/latest",
        &[(
            "application/vnd.ollama.image.license",
            format!("sha256:{}", hex('8')),
        )],
    );

    let found = scan(root);
    assert_eq!(
        ids(&found),
        ["empty:latest", "escape:latest", "garbage:latest"]
    );
    let reason = |id| find(&found, id).unservable_reason().unwrap().to_owned();
    assert!(reason("garbage:latest").contains("not an Ollama manifest"));
    assert!(reason("escape:latest").contains("not a sha256 digest"));
    assert!(reason("empty:latest").contains("no model layer"));
    // Each names the manifest at fault.
    assert_eq!(
        find(&found, "escape:latest").path,
        library.join("escape/latest")
    );
}

#[test]
fn a_library_without_manifests_is_empty() {
    let root = tempfile::tempdir().unwrap();
    assert!(scan(root.path()).is_empty());
    assert!(scan(Path::new("/nonexistent/ollama")).is_empty());
}
