use std::os::unix::fs::symlink;
use std::path::Path;

use super::super::models_dir::scan;
use super::super::{Registry, Source};
use super::{find, gguf_at, ids, model_at};

#[test]
fn finds_plain_folders_hub_cache_and_a_model_directory_itself() {
    let root = tempfile::tempdir().unwrap();
    model_at(&root.path().join("plain/llama-tiny"));
    std::fs::create_dir_all(root.path().join("plain/not-a-model")).unwrap();
    let hub = root
        .path()
        .join("hub/models--mlx-community--Qwen3-0.6B-4bit");
    model_at(&hub.join("snapshots/aaa"));
    model_at(&hub.join("snapshots/bbb"));
    std::fs::create_dir_all(hub.join("refs")).unwrap();
    std::fs::write(hub.join("refs/main"), "aaa\n").unwrap();
    model_at(&root.path().join("single"));

    let mut found = Vec::new();
    for dir in ["plain", "hub", "single"] {
        found.extend(scan(&root.path().join(dir)));
    }
    assert_eq!(
        ids(&found),
        ["llama-tiny", "mlx-community/Qwen3-0.6B-4bit", "single"]
    );
    let qwen = find(&found, "mlx-community/Qwen3-0.6B-4bit");
    assert!(qwen.path.ends_with("snapshots/aaa"));
    assert!(found.iter().all(|entry| entry.source == Source::ModelsDir));
}

#[test]
fn gguf_files_and_folders_of_them_are_models() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    gguf_at(&dir.join("loose-Q8_0.gguf"));
    gguf_at(&dir.join("one/model.Q4_1.gguf"));
    gguf_at(&dir.join("two/two-Q4_0.gguf"));
    gguf_at(&dir.join("two/two-Q8_0.gguf"));
    // config.json wins over a stray GGUF: the folder is a safetensors model.
    model_at(&dir.join("both"));
    gguf_at(&dir.join("both/extra.gguf"));
    std::fs::write(dir.join("notes.txt"), "not a model").unwrap();

    let found = scan(dir);
    assert_eq!(
        ids(&found),
        ["both", "loose-Q8_0", "one", "two:Q4_0", "two:Q8_0"]
    );
    assert_eq!(find(&found, "loose-Q8_0").path, dir.join("loose-Q8_0.gguf"));
    assert_eq!(find(&found, "one").path, dir.join("one/model.Q4_1.gguf"));
    assert_eq!(find(&found, "two:Q8_0").path, dir.join("two/two-Q8_0.gguf"));
    assert_eq!(find(&found, "both").path, dir.join("both"));
    assert!(found.iter().all(|entry| entry.is_servable()));
}

#[test]
fn broken_links_are_unservable_and_split_files_one_model() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    symlink("/nonexistent/corral-model", dir.join("gone")).unwrap();
    symlink("/nonexistent/corral.gguf", dir.join("gone-file.gguf")).unwrap();
    for part in 1..=3 {
        gguf_at(&dir.join(format!("big/big-Q8_0-0000{part}-of-00003.gguf")));
    }

    let found = scan(dir);
    assert_eq!(ids(&found), ["big", "gone", "gone-file"]);
    let gone = find(&found, "gone").unservable_reason().unwrap();
    assert!(
        gone.contains("broken symbolic link") && gone.contains("/nonexistent/corral-model"),
        "{gone}"
    );
    assert!(
        find(&found, "gone-file")
            .unservable_reason()
            .unwrap()
            .contains("broken symbolic link")
    );
    let big = find(&found, "big");
    assert_eq!(big.path, dir.join("big/big-Q8_0-00001-of-00003.gguf"));
    // The worker reads the other parts from the first.
    assert_eq!(big.unservable_reason(), None);
}

#[test]
fn a_missing_or_unreadable_directory_is_skipped() {
    assert!(scan(Path::new("/nonexistent/corral-models")).is_empty());
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("file");
    std::fs::write(&file, "").unwrap();
    assert!(scan(&file).is_empty());
}

#[test]
fn aliases_resolve_and_unknown_names_do_not() {
    let root = tempfile::tempdir().unwrap();
    model_at(&root.path().join("m/llama-tiny"));
    let mut registry = Registry::default();
    for entry in scan(&root.path().join("m")) {
        registry.add(entry);
    }
    registry.alias("default", "llama-tiny");
    registry.alias("ghost", "no-such-model");
    assert_eq!(registry.resolve("default"), Some("llama-tiny"));
    assert_eq!(registry.resolve("llama-tiny"), Some("llama-tiny"));
    assert_eq!(registry.resolve("ghost"), None);
    assert_eq!(registry.resolve("../../etc/passwd"), None);
    assert_eq!(
        registry.servable_path("llama-tiny"),
        Ok(root.path().join("m/llama-tiny").as_path())
    );
}

#[test]
fn alias_patterns_map_families_of_names_and_the_most_specific_wins() {
    let root = tempfile::tempdir().unwrap();
    model_at(&root.path().join("m/big"));
    model_at(&root.path().join("m/small"));
    let mut registry = Registry::default();
    for entry in scan(&root.path().join("m")) {
        registry.add(entry);
    }
    registry.alias("claude-*", "big");
    registry.alias("claude-*haiku*", "small");
    registry.alias("*-mini", "small");
    registry.alias("gpt-*-ghost", "no-such-model");
    let cases = [
        ("claude-sonnet-4-5-20250929", Some("big")),
        ("claude-opus-4-1", Some("big")),
        ("claude-3-5-haiku-20241022", Some("small")),
        ("claude-haiku-4-5", Some("small")),
        ("claude-", Some("big")),
        ("o4-mini", Some("small")),
        ("claude", None),
        ("gpt-4-ghost", None),
        ("xclaude-sonnet", None),
        ("big", Some("big")),
    ];
    for (name, expected) in cases {
        assert_eq!(registry.resolve(name), expected, "{name}");
    }
}
