//! Estimates of generated fixtures and GGUF files, and the errors that name the path.

use super::*;
use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};

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
fn a_fixture_is_estimated_from_its_weights_file_and_attention_shape() {
    let dir = tiny(Arch::Llama, Dtype::F16);
    let estimate = estimate_model_bytes(dir.path()).unwrap();
    let file = fs::metadata(dir.path().join("model.safetensors"))
        .unwrap()
        .len();
    assert_eq!(estimate.weight_bytes, file);
    // Tiny: 4 layers, 4 KV heads of 32 dims, keys and values, 2 bytes each.
    assert_eq!(
        estimate.kv_reserve_bytes,
        4 * 4 * 32 * 2 * 2 * KV_RESERVE_TOKENS
    );
    assert_eq!(
        estimate.total(),
        file * 105 / 100 + estimate.kv_reserve_bytes
    );
}

#[test]
fn f32_models_reserve_four_bytes_per_cached_element() {
    // Qwen2 also leaves head_dim out, so it is derived: 256 hidden / 8 heads = 32.
    let dir = tiny(Arch::Qwen2, Dtype::F32);
    let estimate = estimate_model_bytes(dir.path()).unwrap();
    assert_eq!(
        estimate.kv_reserve_bytes,
        4 * 4 * 32 * 2 * 4 * KV_RESERVE_TOKENS
    );
}

#[test]
fn missing_kv_heads_default_to_the_attention_heads() {
    let dir = tempfile::tempdir().unwrap();
    let config = r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}"#;
    fs::write(dir.path().join("config.json"), config).unwrap();
    fs::write(dir.path().join("a.safetensors"), [0u8; 100]).unwrap();
    fs::write(dir.path().join("b.safetensors"), [0u8; 50]).unwrap();
    fs::write(dir.path().join("tokenizer.json"), [0u8; 1000]).unwrap();
    let estimate = estimate_model_bytes(dir.path()).unwrap();
    assert_eq!(estimate.weight_bytes, 150);
    assert_eq!(
        estimate.kv_reserve_bytes,
        2 * 4 * 16 * 2 * 2 * KV_RESERVE_TOKENS
    );
}

#[test]
fn latent_attention_reserves_its_latent_and_rotary_key_not_full_heads() {
    let dir = tempfile::tempdir().unwrap();
    // DeepSeek V3's shape: 128 heads of 56 would be 28,672 elements a position and layer.
    let config = r#"{"num_hidden_layers": 61, "num_attention_heads": 128,
        "num_key_value_heads": 128, "hidden_size": 7168, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "torch_dtype": "bfloat16"}"#;
    fs::write(dir.path().join("config.json"), config).unwrap();
    fs::write(dir.path().join("a.safetensors"), [0u8; 10]).unwrap();
    let estimate = estimate_model_bytes(dir.path()).unwrap();
    assert_eq!(
        estimate.kv_reserve_bytes,
        61 * (512 + 64) * 2 * KV_RESERVE_TOKENS
    );
}

/// Qwen3.6-35B-A3B's shape: 30 of its 40 layers are gated DeltaNet, whose state does not grow
/// with the sequence; only the other 10 reserve keys and values.
#[test]
fn gated_deltanet_layers_reserve_their_state_not_keys_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let config = r#"{"text_config": {"num_hidden_layers": 40, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "hidden_size": 2048,
        "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4},
        "torch_dtype": "bfloat16"}"#;
    fs::write(dir.path().join("config.json"), config).unwrap();
    fs::write(dir.path().join("a.safetensors"), [0u8; 10]).unwrap();
    let estimate = estimate_model_bytes(dir.path()).unwrap();
    let state = 3 * 8192 * 2 + 32 * 128 * 128 * 4;
    assert_eq!(
        estimate.kv_reserve_bytes,
        10 * 2 * 256 * 2 * 2 * KV_RESERVE_TOKENS + 30 * state
    );
}

/// LFM2 names its layers: a `conv` layer keeps its last `conv_L_cache - 1` inputs.
#[test]
fn short_convolution_layers_reserve_their_last_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let config = r#"{"num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "hidden_size": 64, "conv_L_cache": 3,
        "layer_types": ["conv", "full_attention", "conv"], "torch_dtype": "float32"}"#;
    fs::write(dir.path().join("config.json"), config).unwrap();
    fs::write(dir.path().join("a.safetensors"), [0u8; 10]).unwrap();
    let estimate = estimate_model_bytes(dir.path()).unwrap();
    assert_eq!(
        estimate.kv_reserve_bytes,
        2 * 16 * 2 * 4 * KV_RESERVE_TOKENS + 2 * (2 * 64 * 4)
    );
}

/// Nemotron-H's MLP layers keep nothing; its Mamba-2 layers their conv inputs and f32 scan
/// state; transformers 5 writes the layer list without `num_hidden_layers`.
#[test]
fn mamba2_layers_reserve_their_state_and_mlp_layers_nothing() {
    let state = 3 * (8 * 8 + 2 * 2 * 16) * 4 + 8 * 8 * 16 * 4;
    let attention = 2 * 16 * 2 * 4 * KV_RESERVE_TOKENS;
    for layers in [
        r#""hybrid_override_pattern": "M-M*-""#,
        r#""layers_block_type": ["linear_attention", "mlp", "linear_attention",
            "full_attention", "mlp"]"#,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            r#"{{"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "hidden_size": 64, "mamba_num_heads": 8, "mamba_head_dim": 8, "ssm_state_size": 16,
            "n_groups": 2, "conv_kernel": 4, "dtype": "float32", {layers}}}"#
        );
        fs::write(dir.path().join("config.json"), config).unwrap();
        fs::write(dir.path().join("a.safetensors"), [0u8; 10]).unwrap();
        let estimate = estimate_model_bytes(dir.path()).unwrap();
        assert_eq!(estimate.kv_reserve_bytes, attention + 2 * state, "{layers}");
    }
    // Granite 4's names, its head size `"auto"`: expand × hidden / heads.
    let dir = tempfile::tempdir().unwrap();
    let config = r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "hidden_size": 64, "layer_types": ["mamba", "attention"], "mamba_n_heads": 8,
        "mamba_d_head": "auto", "mamba_expand": 2, "mamba_d_state": 16, "mamba_n_groups": 1,
        "mamba_d_conv": 4, "dtype": "float32"}"#;
    fs::write(dir.path().join("config.json"), config).unwrap();
    fs::write(dir.path().join("a.safetensors"), [0u8; 10]).unwrap();
    let estimate = estimate_model_bytes(dir.path()).unwrap();
    let state = 3 * (8 * 16 + 2 * 16) * 4 + 8 * 16 * 16 * 4;
    assert_eq!(estimate.kv_reserve_bytes, attention + state);
}

#[test]
fn a_gguf_file_is_estimated_from_its_size_and_the_process_base() {
    let dir = tempfile::tempdir().unwrap();
    // An Ollama blob: a GGUF without the extension.
    let blob = dir.path().join("sha256-0123");
    fs::write(&blob, [0u8; 4096]).unwrap();
    let estimate = estimate_model_bytes(&blob).unwrap();
    assert_eq!(estimate.weight_bytes, 4096);
    assert_eq!(estimate.kv_reserve_bytes, 0);
    assert_eq!(estimate.base_bytes, PROCESS_BASE_BYTES);
}

#[test]
fn total_adds_five_percent_to_the_weights_then_the_reserve_and_the_base() {
    let estimate = ModelEstimate {
        weight_bytes: 1_000_000_007,
        kv_reserve_bytes: 3,
        base_bytes: 5,
    };
    assert_eq!(estimate.total(), 1_000_000_007 * 105 / 100 + 3 + 5);
    let huge = ModelEstimate {
        weight_bytes: u64::MAX,
        kv_reserve_bytes: 1,
        base_bytes: 1,
    };
    assert_eq!(huge.total(), u64::MAX);
}

#[test]
fn errors_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent");
    let error = estimate_model_bytes(&missing).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound);
    assert!(error.to_string().contains("absent"), "{error}");

    let config = dir.path().join("config.json");
    let error = estimate_model_bytes(dir.path()).unwrap_err();
    assert!(
        error.to_string().contains(&config.display().to_string()),
        "{error}"
    );

    fs::write(&config, r#"{"num_hidden_layers": "many"}"#).unwrap();
    let error = estimate_model_bytes(dir.path()).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    assert!(
        error.to_string().contains(&config.display().to_string()),
        "{error}"
    );
}

#[test]
fn a_wrappers_text_config_gives_the_attention_shape_and_either_dtype_key_counts() {
    let dir = tempfile::tempdir().unwrap();
    // mistral3 as transformers 5 writes it: the dtype at the top, the shape in text_config.
    let config = serde_json::json!({
        "model_type": "mistral3", "dtype": "float32",
        "text_config": {"num_hidden_layers": 3, "num_attention_heads": 8,
                        "num_key_value_heads": 2, "head_dim": 16, "hidden_size": 64},
        "vision_config": {"num_hidden_layers": 24, "num_attention_heads": 16, "hidden_size": 1024},
    });
    fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    fs::write(dir.path().join("model.safetensors"), [0u8; 10]).unwrap();
    let estimate = estimate_model_bytes(dir.path()).unwrap();
    assert_eq!(
        estimate.kv_reserve_bytes,
        3 * 2 * 16 * 2 * 4 * KV_RESERVE_TOKENS
    );
    let dense = serde_json::json!({
        "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "dtype": "float32",
    });
    fs::write(dir.path().join("config.json"), dense.to_string()).unwrap();
    assert_eq!(
        estimate_model_bytes(dir.path()).unwrap().kv_reserve_bytes,
        2 * 4 * 16 * 2 * 4 * KV_RESERVE_TOKENS
    );
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
    assert_eq!(estimate_model_bytes(dir.path()).unwrap().weight_bytes, 150);
    let index = serde_json::json!({"weight_map": {"a": "model-00001-of-00002.safetensors"}});
    fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    assert_eq!(estimate_model_bytes(dir.path()).unwrap().weight_bytes, 100);

    // A test directory: the model beside the reference outputs it is checked against.
    let fixture = tempfile::tempdir().unwrap();
    fs::write(fixture.path().join("config.json"), config).unwrap();
    fs::write(fixture.path().join("model.safetensors"), [0u8; 70]).unwrap();
    fs::write(fixture.path().join("reference.safetensors"), [0u8; 30]).unwrap();
    assert_eq!(
        estimate_model_bytes(fixture.path()).unwrap().weight_bytes,
        70
    );
}
