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
            "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 96,
            "rms_norm_eps": 1e-5,
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
    let width = parsed.key_or_else("moe_intermediate_size", || parsed.intermediate_size());
    assert_eq!(width.unwrap(), 32);
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
