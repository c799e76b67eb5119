use serde_json::json;

use super::*;

#[test]
fn per_layer_quantization_entries_are_read_as_mlx_lm_writes_them() {
    let config = json!({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 96,
        "rms_norm_eps": 1e-5,
        "quantization": {
            "group_size": 64, "bits": 4, "mode": "affine",
            "model.embed_tokens": {"group_size": 32, "bits": 8},
            "lm_head": false,
        },
    });
    let parsed = ModelConfig::from_json(config.clone(), Path::new("config.json")).unwrap();
    assert_eq!(
        parsed.quantization,
        Some(Quantization {
            group_size: 64,
            bits: 4,
            mode: QuantMode::Affine,
        })
    );
    assert_eq!(
        parsed.layer_quantization,
        HashMap::from([(
            "model.embed_tokens".to_owned(),
            Quantization {
                group_size: 32,
                bits: 8,
                mode: QuantMode::Affine,
            }
        )])
    );

    let mut bad = config;
    bad["quantization"]["model.embed_tokens"]["bits"] = json!(7);
    let error = ModelConfig::from_json(bad, Path::new("config.json"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("model.embed_tokens") && error.contains('7'),
        "{error}"
    );
}

#[test]
fn a_wrapper_is_read_as_its_text_model_with_the_text_models_names() {
    let config = json!({
        "model_type": "mistral3",
        "text_config": {
            "model_type": "mistral", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
            "vocab_size": 96, "rms_norm_eps": 1e-5,
        },
        "quantization": {
            "group_size": 64, "bits": 4,
            "language_model.model.layers.0.mlp.down_proj": {"group_size": 64, "bits": 8},
        },
    });
    let parsed = ModelConfig::from_json(config, Path::new("config.json")).unwrap();
    assert_eq!(
        (parsed.model_type.as_str(), parsed.hidden_size),
        ("mistral3", 64)
    );
    assert_eq!(parsed.tie_word_embeddings, Some(false));
    let eight_bits = Quantization {
        group_size: 64,
        bits: 8,
        mode: QuantMode::Affine,
    };
    assert_eq!(
        parsed.layer_quantization,
        HashMap::from([("model.layers.0.mlp.down_proj".to_owned(), eight_bits)])
    );
    let wrapper = parsed.wrapper.unwrap();
    for (name, text) in [
        (
            "language_model.model.norm.weight",
            Some("model.norm.weight"),
        ),
        ("language_model.lm_head.weight", Some("lm_head.weight")),
        (
            "model.language_model.norm.weight",
            Some("model.norm.weight"),
        ),
        ("lm_head.weight", Some("lm_head.weight")),
        ("vision_tower.patch_conv.weight", None),
        ("model.multi_modal_projector.linear_1.weight", None),
    ] {
        assert_eq!(wrapper.text_name(name).as_deref(), text, "{name}");
    }
}

#[test]
fn every_wrapper_is_served() {
    for wrapper in WRAPPERS {
        assert!(
            SUPPORTED.contains(&wrapper.model_type),
            "{}",
            wrapper.model_type
        );
    }
}

#[test]
fn transformers_5_rope_parameters_give_the_base_and_the_scaling() {
    let config = json!({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 96, "rms_norm_eps": 1e-5,
        "rope_parameters": {
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    });
    let parsed = ModelConfig::from_json(config, Path::new("config.json")).unwrap();
    assert_eq!(parsed.rope_theta, 500_000.0);
    assert_eq!(
        parsed.rope_scaling,
        Some(RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        })
    );
}

#[test]
fn a_mixture_of_experts_without_intermediate_size_reads_and_asks_for_it_only_when_used() {
    // Qwen3.6-35B-A3B's text config as transformers' Qwen3_5MoeTextConfig writes it.
    let config = json!({
        "model_type": "qwen3_5_moe",
        "text_config": {
            "model_type": "qwen3_5_moe_text", "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "vocab_size": 96, "rms_norm_eps": 1e-6,
            "moe_intermediate_size": 32, "num_experts": 4,
            "layer_types": ["linear_attention", "full_attention"],
        },
    });
    let parsed = ModelConfig::from_json(config, Path::new("config.json")).unwrap();
    let error = parsed.intermediate_size().unwrap_err().to_string();
    assert!(
        error.contains("qwen3_5_moe needs intermediate_size"),
        "{error}"
    );
    assert_eq!(
        parsed.layer_types().unwrap(),
        Some(vec![
            "linear_attention".to_owned(),
            "full_attention".to_owned()
        ])
    );
    assert_eq!(
        parsed.key::<i32>("moe_intermediate_size").unwrap(),
        Some(32)
    );
}

#[test]
fn a_wrapper_keeps_its_text_vocabulary_unless_it_states_its_own() {
    let text = json!({
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 4, "vocab_size": 96, "rms_norm_eps": 1e-6,
    });
    let transformers_5 = json!({"model_type": "gemma3", "text_config": text});
    let parsed = ModelConfig::from_json(transformers_5, Path::new("config.json")).unwrap();
    assert_eq!(parsed.vocab_size, 96);
    let stated = json!({"model_type": "gemma3", "text_config": text, "vocab_size": 128});
    let parsed = ModelConfig::from_json(stated, Path::new("config.json")).unwrap();
    assert_eq!(parsed.vocab_size, 128);
}

fn quantization_of(entry: serde_json::Value) -> Result<Option<Quantization>, String> {
    parse_quantization(&entry)
}

#[test]
fn each_mode_reads_with_its_defaults_where_mlx_lm_leaves_them_out() {
    for (entry, expected) in [
        // The mixed recipes without --q-group-size write a null group size.
        (
            json!({"group_size": null, "bits": 2, "mode": "affine"}),
            (64, 2, QuantMode::Affine),
        ),
        (json!({"bits": 8}), (64, 8, QuantMode::Affine)),
        (json!({"mode": "mxfp4"}), (32, 4, QuantMode::Mxfp4)),
        (
            json!({"group_size": 32, "bits": 8, "mode": "mxfp8"}),
            (32, 8, QuantMode::Mxfp8),
        ),
        (
            json!({"group_size": 16, "bits": 4, "mode": "nvfp4"}),
            (16, 4, QuantMode::Nvfp4),
        ),
    ] {
        let (group_size, bits, mode) = expected;
        assert_eq!(
            quantization_of(entry.clone()),
            Ok(Some(Quantization {
                group_size,
                bits,
                mode
            })),
            "{entry}"
        );
    }
}

#[test]
fn what_mlx_cannot_compute_is_refused_by_layer_and_mode() {
    for (entry, named) in [
        (
            json!({"group_size": 16, "bits": 4, "mode": "mxfp4"}),
            "mxfp4",
        ),
        (
            json!({"group_size": 32, "bits": 4, "mode": "mxfp8"}),
            "mxfp8",
        ),
        (
            json!({"group_size": 32, "bits": 4, "mode": "nvfp4"}),
            "nvfp4",
        ),
        (
            json!({"group_size": 16, "bits": 4, "mode": "affine"}),
            "affine",
        ),
        (json!({"group_size": 64, "bits": 7}), "affine"),
    ] {
        let error = quantization_of(entry.clone()).unwrap_err();
        assert!(error.contains(named), "{entry}: {error}");
    }
    let config = json!({
        "model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128, "rms_norm_eps": 1e-6,
        "quantization": {
            "group_size": 16, "bits": 4, "mode": "nvfp4",
            "model.layers.1.mlp.switch_mlp.up_proj":
                {"group_size": 16, "bits": 4, "mode": "nvfp4", "global_scale": true},
        },
    });
    let error = ModelConfig::from_json(config, Path::new("config.json"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("model.layers.1.mlp.switch_mlp.up_proj")
            && error.contains("nvfp4 with a global scale"),
        "{error}"
    );
}

#[test]
fn a_layer_config_json_does_not_name_is_read_from_its_tensors_as_mlx_lm_reads_it() {
    // 64 columns: affine 4-bit groups of 64 pack into 8 words with 1 scale; 8-bit groups of 32
    // into 16 words with 2 scales.
    let affine = |group_size, bits| Quantization {
        group_size,
        bits,
        mode: QuantMode::Affine,
    };
    assert_eq!(Quantization::inferred(64, 8, 1, true), Some(affine(64, 4)));
    assert_eq!(Quantization::inferred(64, 16, 2, true), Some(affine(32, 8)));
    assert_eq!(
        Quantization::inferred(128, 16, 1, true),
        Some(affine(128, 4))
    );
    let float = |mode| {
        let (group_size, bits) = QuantMode::defaults(mode);
        Some(Quantization {
            group_size,
            bits,
            mode,
        })
    };
    assert_eq!(
        Quantization::inferred(64, 8, 2, false),
        float(QuantMode::Mxfp4)
    );
    assert_eq!(
        Quantization::inferred(64, 16, 2, false),
        float(QuantMode::Mxfp8)
    );
    assert_eq!(
        Quantization::inferred(64, 8, 4, false),
        float(QuantMode::Nvfp4)
    );
    // uint8 scales in groups no float mode has; 7 bits; a group that does not divide.
    assert_eq!(Quantization::inferred(64, 8, 1, false), None);
    assert_eq!(Quantization::inferred(64, 14, 1, true), None);
    assert_eq!(Quantization::inferred(64, 8, 3, true), None);
    // From headers alone, the packed words per uint8 scale tell the float modes apart.
    for mode in FLOAT_MODES {
        let (group_size, bits) = mode.defaults();
        let words = (group_size * bits / 32) as u64;
        assert_eq!(Quantization::float_mode_of(words), Some(mode));
    }
    assert_eq!(Quantization::float_mode_of(1), None);
}
