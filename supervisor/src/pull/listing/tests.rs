//! The files a pull chooses from the hub's listing, and the hub's names and hashes checked
//! before they become paths.

use super::*;
use crate::pull::name::ModelRef;

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

fn repo() -> RepoId {
    ModelRef::parse("org/model").unwrap().repo
}

fn listing(files: &[&str]) -> RepoListing {
    let siblings = files
        .iter()
        .map(|&name| {
            let lfs = (name.ends_with(".safetensors") || name.ends_with(".gguf")).then(|| Lfs {
                sha256: "ab".repeat(32),
                size: 1000,
            });
            Sibling {
                rfilename: name.to_owned(),
                size: Some(10),
                blob_id: Some("cd".repeat(20)),
                lfs,
            }
        })
        .collect();
    RepoListing {
        sha: COMMIT.to_owned(),
        siblings,
    }
}

fn names(files: &[RemoteFile]) -> Vec<&str> {
    files.iter().map(|file| file.name.as_str()).collect()
}

#[test]
fn a_safetensors_model_takes_its_weights_and_companions_with_config_last() {
    let listing = listing(&[
        ".gitattributes",
        "README.md",
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "original/consolidated.safetensors",
        "model.Q4_0.gguf",
        "pytorch_model.bin",
    ]);
    let files = select(&repo(), &listing, None).unwrap();
    assert_eq!(
        names(&files),
        [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "config.json",
        ]
    );
    let weights = &files[0];
    assert_eq!(weights.blob, "ab".repeat(32));
    assert_eq!(weights.sha256.as_deref(), Some(weights.blob.as_str()));
    assert_eq!(weights.size, 1000);
    let config = files.last().unwrap();
    assert_eq!(
        (config.blob.as_str(), config.sha256.as_deref()),
        (&*"cd".repeat(20), None)
    );
}

#[test]
fn a_gguf_repository_takes_its_one_gguf_or_the_file_asked_for() {
    let one = listing(&["README.md", "model.Q8_0.gguf"]);
    assert_eq!(
        names(&select(&repo(), &one, None).unwrap()),
        ["model.Q8_0.gguf"]
    );

    let several = listing(&["model.Q4_0.gguf", "model.Q8_0.gguf", "config.json"]);
    let error = select(&repo(), &several, None).unwrap_err().to_string();
    assert!(
        error.contains("model.Q4_0.gguf, model.Q8_0.gguf"),
        "{error}"
    );
    assert!(error.contains("--file"), "{error}");
    let chosen = select(&repo(), &several, Some("model.Q4_0.gguf")).unwrap();
    assert_eq!(names(&chosen), ["model.Q4_0.gguf"]);
}

#[test]
fn a_file_must_be_a_gguf_the_repository_holds() {
    let listing = listing(&["model.Q4_0.gguf", "config.json"]);
    assert!(matches!(
        select(&repo(), &listing, Some("config.json")),
        Err(PullError::NotAGgufFile(_))
    ));
    assert!(matches!(
        select(&repo(), &listing, Some("../x.gguf")),
        Err(PullError::NotAGgufFile(_))
    ));
    let error = select(&repo(), &listing, Some("other.gguf"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("other.gguf") && error.contains("model.Q4_0.gguf"),
        "{error}"
    );
}

#[test]
fn a_repository_without_weights_says_what_it_holds() {
    let error = select(&repo(), &listing(&["README.md", "pytorch_model.bin"]), None)
        .unwrap_err()
        .to_string();
    assert!(error.contains("org/model"), "{error}");
    assert!(error.contains("README.md, pytorch_model.bin"), "{error}");
    let no_config = select(&repo(), &listing(&["model.safetensors"]), None)
        .unwrap_err()
        .to_string();
    assert!(no_config.contains("without a config.json"), "{no_config}");
}

#[test]
fn hashes_from_the_hub_are_checked_before_they_become_paths() {
    let mut bad_commit = listing(&["model.Q8_0.gguf"]);
    bad_commit.sha = "../../etc".to_owned();
    assert!(matches!(
        select(&repo(), &bad_commit, None),
        Err(PullError::MalformedListing { .. })
    ));
    let mut bad_blob = listing(&["model.Q8_0.gguf"]);
    bad_blob.siblings[0].lfs.as_mut().unwrap().sha256 = "../x".to_owned();
    assert!(matches!(
        select(&repo(), &bad_blob, None),
        Err(PullError::MalformedListing { .. })
    ));
}
