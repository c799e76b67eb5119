use super::*;

fn model_dir(parent: &Path, name: &str, config: serde_json::Value) -> std::path::PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("model.safetensors"), b"").unwrap();
    std::fs::write(dir.join("tokenizer.json"), b"{}").unwrap();
    dir
}

fn bert(model_type: &str, architecture: &str) -> serde_json::Value {
    serde_json::json!({
        "model_type": model_type, "architectures": [architecture], "vocab_size": 100,
        "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 16, "max_position_embeddings": 64
    })
}

#[test]
fn encoders_are_embedding_models_and_classifiers_rerank_models() {
    let root = tempfile::tempdir().unwrap();
    let embedder = describe(&model_dir(root.path(), "e5", bert("bert", "BertModel")));
    assert_eq!(
        (embedder.kind, embedder.unservable),
        (ModelKind::Embedding, None)
    );
    let reranker = describe(&model_dir(
        root.path(),
        "bge-reranker",
        bert("xlm-roberta", "XLMRobertaForSequenceClassification"),
    ));
    assert_eq!(
        (reranker.kind, reranker.unservable),
        (ModelKind::Rerank, None)
    );
}

#[test]
fn unsupported_encoders_are_listed_with_a_reason() {
    let root = tempfile::tempdir().unwrap();
    let described = describe(&model_dir(
        root.path(),
        "modernbert",
        bert("modernbert", "ModernBertModel"),
    ));
    assert_eq!(described.kind, ModelKind::Embedding);
    let reason = described.unservable.unwrap();
    assert!(reason.contains("modernbert"), "{reason}");
}

#[test]
fn a_wrappers_text_model_is_served_and_other_vision_models_are_not() {
    let root = tempfile::tempdir().unwrap();
    let text = serde_json::json!({
        "model_type": "mistral", "vocab_size": 100, "hidden_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
        "intermediate_size": 16, "rms_norm_eps": 1e-5
    });
    let vision = |model_type: &str| {
        serde_json::json!({
            "model_type": model_type, "text_config": text,
            "vision_config": {"model_type": "pixtral"}
        })
    };
    let mistral3 = describe(&model_dir(root.path(), "mistral-small", vision("mistral3")));
    assert_eq!(
        (mistral3.kind, mistral3.unservable),
        (ModelKind::Chat, None)
    );
    let llava = describe(&model_dir(root.path(), "llava", vision("llava")));
    let reason = llava.unservable.unwrap();
    assert!(reason.contains("vision"), "{reason}");
}

#[test]
fn a_checkpoint_is_described_with_its_parameters_active_parameters_and_quantization() {
    let fixture = |arch: &str, variant: &str| {
        describe(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/data/architectures")
                .join(arch)
                .join(variant),
        )
    };
    let routed = 4 * 3 * 64 * 64;
    let moe = fixture("qwen3_moe", "f32");
    assert_eq!(
        (
            moe.parameters,
            moe.active_parameters,
            moe.quantization.as_deref()
        ),
        (Some(103_040), Some(103_040 - routed / 2), Some("f32"))
    );
    // Only model.safetensors: the reference logits beside it are not weights.
    let model = std::fs::metadata(moe.path.join("model.safetensors")).unwrap();
    assert_eq!(moe.size_bytes, model.len());
    let q4 = fixture("qwen3_moe", "q4");
    assert_eq!(
        (q4.parameters, q4.quantization.as_deref()),
        (Some(103_040), Some("4-bit"))
    );
    let mxfp4 = fixture("gpt_oss", "hf-mxfp4");
    assert_eq!(mxfp4.quantization.as_deref(), Some("mxfp4"));
    // The wrapper's vision tower is not the model served.
    let mistral3 = fixture("mistral3", "hf");
    assert_eq!(
        (mistral3.parameters, mistral3.active_parameters),
        (Some(65_856), None)
    );
}

/// Checkpoints mlx_lm.convert quantized in each mode and recipe count their float original's
/// parameters and are servable, named by their mode; nvfp4 experts with a global scale each are
/// refused by layer and mode.
#[test]
fn each_quantization_mode_is_described_and_what_mlx_cannot_compute_is_unservable() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    let float = |arch: &str| describe(&data.join("architectures").join(arch).join("f32"));
    for (fixture, arch, label) in [
        ("llama_mixed_2_6", "llama", "4-bit"),
        ("llama_nvfp4", "llama", "nvfp4"),
        ("qwen3_moe_mxfp8", "qwen3_moe", "mxfp8"),
        ("gpt_oss_mxfp4", "gpt_oss", "mxfp4"),
    ] {
        let described = describe(&data.join("quant_modes").join(fixture));
        assert_eq!(described.unservable, None, "{fixture}");
        assert_eq!(described.quantization.as_deref(), Some(label), "{fixture}");
        let original = float(arch);
        assert_eq!(
            (described.parameters, described.active_parameters),
            (original.parameters, original.active_parameters),
            "{fixture}"
        );
    }
    let refused = describe(&data.join("quant_modes/qwen3_moe_nvfp4_global_scale"));
    let reason = refused.unservable.unwrap();
    assert!(
        reason.contains("model.layers.1.mlp.switch_mlp.") && reason.contains("nvfp4"),
        "{reason}"
    );
}
