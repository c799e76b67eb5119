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
    let fixture = |arch: &str, layout: &str| {
        describe(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/data/toolchain")
                .join(arch)
                .join(layout),
        )
    };
    // transformers' `num_parameters()`; 2 layers route to 2 of 4 experts of 3 × 64 × 64.
    let routed = 2 * 4 * 3 * 64 * 64;
    let moe = fixture("mixtral", "mlx");
    assert_eq!(
        (
            moe.parameters,
            moe.active_parameters,
            moe.quantization.as_deref()
        ),
        (Some(140_096), Some(140_096 - routed / 2), Some("f32"))
    );
    // Only model.safetensors: the reference logits beside it are not weights.
    let model = std::fs::metadata(moe.path.join("model.safetensors")).unwrap();
    assert_eq!(moe.size_bytes, model.len());
    let q4 = fixture("mixtral", "mlx-q4");
    assert_eq!(
        (q4.parameters, q4.quantization.as_deref()),
        (Some(140_096), Some("4-bit"))
    );
    // The wrapper's vision tower is not the model served: transformers counts 57_664 in its
    // language model (the head tied to the embedding), 76_736 with the tower and projector.
    let mistral3 = fixture("ministral3", "hf");
    assert_eq!(
        (mistral3.parameters, mistral3.active_parameters),
        (Some(57_664), None)
    );
}

/// Checkpoints mlx_lm.convert quantized in each mode and recipe count their float original's
/// parameters and are servable, named by their mode; nvfp4 experts with a global scale each are
/// refused by layer and mode.
#[test]
fn each_quantization_mode_is_described_and_what_mlx_cannot_compute_is_unservable() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    let float = |arch: &str| describe(&data.join("toolchain").join(arch).join("hf"));
    for (fixture, arch, label) in [
        ("qwen3_mixed_2_6", "qwen3", "4-bit"),
        ("qwen3_nvfp4", "qwen3", "nvfp4"),
        ("mixtral_mxfp8", "mixtral", "mxfp8"),
        ("mixtral_mxfp4", "mixtral", "mxfp4"),
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
    let refused = describe(&data.join("quant_modes/mixtral_nvfp4_global_scale"));
    let reason = refused.unservable.unwrap();
    assert!(
        reason.contains("model.layers.0.block_sparse_moe.switch_mlp.") && reason.contains("nvfp4"),
        "{reason}"
    );
}

#[test]
fn a_checkpoint_with_a_tower_the_worker_runs_reads_images() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    for layout in ["qwen3_5/hf", "qwen3_5/mlx-q4", "qwen3_5_moe/mlx"] {
        let description = describe(&data.join("vision").join(layout));
        assert_eq!(description.unservable, None, "{layout}");
        assert!(description.vision, "{layout}");
        // The processor's largest image (8192 pixels) is 512 patches of 16 pixels: two heads'
        // scores and probabilities, and 5 hidden widths of 32 and an MLP of 64 per patch, in f32.
        let expected = (2 * 512 * 512 * 2 + 512 * (5 * 32 + 64)) * 4;
        assert_eq!(description.vision_reserve_bytes, expected, "{layout}");
    }
    // A text model, Gemma 3's wrapper, whose tower this worker does not run yet, and a Qwen3.5
    // tower without a processor config, which takes no images (and reserves nothing for them).
    for layout in ["qwen3/hf", "gemma3/hf", "qwen3_5/hf"] {
        assert!(
            !describe(&data.join("toolchain").join(layout)).vision,
            "{layout}"
        );
    }
}

#[test]
fn a_checkpoint_says_whether_it_kept_its_multi_token_prediction_layers() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    for arch in ["deepseek_v3", "glm4_moe", "qwen3_5"] {
        let kept = describe(&data.join("mtp").join(arch));
        assert_eq!(kept.mtp, MtpLayers::Kept, "{arch}");
        // The layers run only when asked for, so they count as no parameter of the model.
        let toolchain = describe(&data.join("toolchain").join(arch).join("hf"));
        assert_eq!(kept.parameters, toolchain.parameters, "{arch}");
    }
    // transformers' DeepSeek V3 and GLM-4.5 configs name one next-n layer that their weights
    // lack, as a conversion that drops it leaves them; Qwen3.5's config class names none.
    for (layout, expected) in [
        ("deepseek_v3/hf", MtpLayers::Dropped),
        ("deepseek_v3/mlx", MtpLayers::Dropped),
        ("glm4_moe/hf", MtpLayers::Dropped),
        ("qwen3_5/hf", MtpLayers::None),
        ("llama/hf", MtpLayers::None),
    ] {
        let toolchain = describe(&data.join("toolchain").join(layout));
        assert_eq!(toolchain.mtp, expected, "{layout}");
    }
    // llama.cpp's conversions with the layers as `nextn` tensors, and without them.
    for arch in ["glm4_moe", "qwen3_5"] {
        let gguf = describe(&data.join(format!("mtp/{arch}-gguf/model.gguf")));
        assert_eq!(gguf.mtp, MtpLayers::Kept, "{arch}");
        let trunk = describe(&data.join(format!("toolchain/{arch}/gguf-f32/model.gguf")));
        assert_eq!(trunk.mtp, MtpLayers::None, "{arch}");
        assert_eq!(gguf.parameters, trunk.parameters, "{arch}");
    }
}
