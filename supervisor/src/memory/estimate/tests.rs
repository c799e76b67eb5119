//! Estimates of generated fixtures and GGUF files from the cache sizes their worker described,
//! and the errors that name the path. What those sizes are for each architecture is the worker's
//! (`describe`, held to the built layers by the `toolchain` and `architectures` tests).

use super::*;
use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use corral_ipc::WindowedCache;

fn tiny(arch: Arch, dtype: Dtype) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let options = FixtureOptions {
        size: Size::Tiny,
        arch,
        dtype,
        quantize: None,
        format: Format::Safetensors,
    };
    corral_fixture::generate(&options, dir.path()).unwrap();
    dir
}

#[test]
fn a_fixture_is_estimated_from_its_weights_file_and_described_caches() {
    let dir = tiny(Arch::Llama, Dtype::F16);
    // Tiny: 4 layers, 4 KV heads of 32 dims, keys and values, 2 bytes each.
    let cache = CacheSize {
        bytes_per_position: 4 * 4 * 32 * 2 * 2,
        ..CacheSize::default()
    };
    let estimate = estimate_model_bytes(dir.path(), Some(&cache)).unwrap();
    let file = fs::metadata(dir.path().join("model.safetensors"))
        .unwrap()
        .len();
    assert_eq!(estimate.weight_bytes, file);
    assert_eq!(
        estimate.kv_reserve_bytes,
        4 * 4 * 32 * 2 * 2 * KV_RESERVE_TOKENS
    );
    assert_eq!(
        estimate.total(),
        file * 105 / 100 + estimate.kv_reserve_bytes
    );
}

/// Gemma 3's sliding layers keep at most their window, a hybrid's recurrent layers one state
/// whatever the length.
#[test]
fn windows_cap_their_layers_and_recurrent_states_count_once() {
    let dir = tiny(Arch::Llama, Dtype::F32);
    let cache = CacheSize {
        bytes_per_position: 100,
        windowed: vec![
            WindowedCache {
                window: 512,
                bytes_per_position: 10,
            },
            WindowedCache {
                window: 1 << 20,
                bytes_per_position: 1,
            },
        ],
        bytes_per_sequence: 7,
    };
    let estimate = estimate_model_bytes(dir.path(), Some(&cache)).unwrap();
    assert_eq!(
        estimate.kv_reserve_bytes,
        100 * KV_RESERVE_TOKENS + 512 * 10 + KV_RESERVE_TOKENS + 7
    );
    assert_eq!(estimate.base_bytes, 0);
}

#[test]
fn an_undescribed_directory_reserves_the_process_base() {
    let dir = tiny(Arch::Qwen2, Dtype::F32);
    let estimate = estimate_model_bytes(dir.path(), None).unwrap();
    assert_eq!(estimate.kv_reserve_bytes, 0);
    assert_eq!(estimate.base_bytes, PROCESS_BASE_BYTES);
}

#[test]
fn a_gguf_file_is_estimated_from_its_size_and_the_process_base() {
    let dir = tempfile::tempdir().unwrap();
    // An Ollama blob: a GGUF without the extension.
    let blob = dir.path().join("sha256-0123");
    fs::write(&blob, [0u8; 4096]).unwrap();
    let cache = CacheSize {
        bytes_per_position: 100,
        ..CacheSize::default()
    };
    let estimate = estimate_model_bytes(&blob, Some(&cache)).unwrap();
    assert_eq!(estimate.weight_bytes, 4096);
    assert_eq!(estimate.kv_reserve_bytes, 0);
    assert_eq!(estimate.base_bytes, PROCESS_BASE_BYTES);
}

#[test]
fn total_adds_five_percent_to_the_weights_then_the_reserve_and_the_base() {
    let estimate = ModelEstimate {
        weight_bytes: 1_000_000_007,
        kv_reserve_bytes: 3,
        vision_reserve_bytes: 7,
        base_bytes: 5,
    };
    assert_eq!(estimate.total(), 1_000_000_007 * 105 / 100 + 3 + 7 + 5);
    let huge = ModelEstimate {
        weight_bytes: u64::MAX,
        kv_reserve_bytes: 1,
        vision_reserve_bytes: 1,
        base_bytes: 1,
    };
    assert_eq!(huge.total(), u64::MAX);
}

#[test]
fn errors_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent");
    let error = estimate_model_bytes(&missing, None).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound);
    assert!(error.to_string().contains("absent"), "{error}");
}

#[test]
fn only_the_checkpoints_files_count_not_consolidated_copies_or_other_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let config = r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}"#;
    fs::write(dir.path().join("config.json"), config).unwrap();
    // A Mistral release: the same weights as shards and as consolidated.safetensors.
    fs::write(
        dir.path().join("model-00001-of-00002.safetensors"),
        [0u8; 100],
    )
    .unwrap();
    fs::write(
        dir.path().join("model-00002-of-00002.safetensors"),
        [0u8; 50],
    )
    .unwrap();
    fs::write(dir.path().join("consolidated.safetensors"), [0u8; 150]).unwrap();
    let weights = |dir: &Path| estimate_model_bytes(dir, None).unwrap().weight_bytes;
    assert_eq!(weights(dir.path()), 150);
    let index = serde_json::json!({"weight_map": {"a": "model-00001-of-00002.safetensors"}});
    fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    assert_eq!(weights(dir.path()), 100);

    // A test directory: the model beside the reference outputs it is checked against.
    let fixture = tempfile::tempdir().unwrap();
    fs::write(fixture.path().join("config.json"), config).unwrap();
    fs::write(fixture.path().join("model.safetensors"), [0u8; 70]).unwrap();
    fs::write(fixture.path().join("reference.safetensors"), [0u8; 30]).unwrap();
    assert_eq!(weights(fixture.path()), 70);
}
