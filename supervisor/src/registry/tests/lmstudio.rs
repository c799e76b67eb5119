use std::os::unix::fs::symlink;

use super::super::Source;
use super::super::lmstudio::scan;
use super::{find, gguf_at, ids, model_at};

#[test]
fn gguf_files_and_mlx_folders_are_named_publisher_slash_repo() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    gguf_at(&root.join("lmstudio-community/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf"));
    model_at(&root.join("mlx-community/Qwen3-0.6B-4bit"));
    gguf_at(&root.join("bartowski/Llama-GGUF/Llama-Q4_K_M.gguf"));
    gguf_at(&root.join("bartowski/Llama-GGUF/Llama-Q6_K.gguf"));
    std::fs::create_dir_all(root.join("empty/folder")).unwrap();

    let found = scan(root);
    assert_eq!(
        ids(&found),
        [
            "bartowski/Llama-GGUF:Q4_K_M",
            "bartowski/Llama-GGUF:Q6_K",
            "lmstudio-community/Qwen3-0.6B-GGUF",
            "mlx-community/Qwen3-0.6B-4bit",
        ]
    );
    assert_eq!(
        find(&found, "lmstudio-community/Qwen3-0.6B-GGUF").path,
        root.join("lmstudio-community/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf")
    );
    assert_eq!(
        find(&found, "mlx-community/Qwen3-0.6B-4bit").path,
        root.join("mlx-community/Qwen3-0.6B-4bit")
    );
    assert!(found.iter().all(|entry| entry.is_servable()));
    assert!(found.iter().all(|entry| entry.source == Source::LmStudio));
}

#[test]
fn a_vision_repo_pairs_its_model_with_its_projector_and_a_broken_link_is_unservable() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    gguf_at(&root.join("lmstudio-community/gemma-3-4b-it-GGUF/gemma-3-4b-it-Q4_K_M.gguf"));
    gguf_at(&root.join("lmstudio-community/gemma-3-4b-it-GGUF/mmproj-model-f16.gguf"));
    std::fs::create_dir_all(root.join("someone")).unwrap();
    symlink("/nonexistent/corral-repo", root.join("someone/moved")).unwrap();

    let found = scan(root);
    assert_eq!(
        ids(&found),
        ["lmstudio-community/gemma-3-4b-it-GGUF", "someone/moved"]
    );
    let vision = find(&found, "lmstudio-community/gemma-3-4b-it-GGUF");
    assert!(vision.is_servable());
    assert_eq!(
        vision.projector.as_deref(),
        Some(
            root.join("lmstudio-community/gemma-3-4b-it-GGUF/mmproj-model-f16.gguf")
                .as_path()
        )
    );
    let moved = find(&found, "someone/moved").unservable_reason().unwrap();
    assert!(moved.contains("broken symbolic link"), "{moved}");
}
