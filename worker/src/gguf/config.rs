//! A GGUF's hyperparameters, translated into the `config.json` keys the model already reads, so
//! both formats go through one validation.
//!
//! llama.cpp's converter permutes the q and k projections of `llama` (and Mistral, which it
//! writes as `llama`) so that its interleaved RoPE applies; MLX's `traditional` RoPE is that same
//! rotation. Qwen2 and Qwen3 keep Hugging Face's layout and rotate halves.

use serde_json::{Map, Value as Json, json};

use super::header::{GgufError, GgufHeader};

/// The architectures the worker serves, as `general.architecture` names them.
pub const ARCHITECTURES: [&str; 4] = ["llama", "mistral", "qwen2", "qwen3"];

pub fn config_json(header: &GgufHeader) -> Result<Json, GgufError> {
    let arch = header
        .architecture()
        .ok_or_else(|| header.invalid("no general.architecture"))?;
    if !ARCHITECTURES.contains(&arch) {
        return Err(header.invalid(format!(
            "architecture {arch:?} is not served (supported: {})",
            ARCHITECTURES.join(", ")
        )));
    }
    let value = |key: &str| header.get(&format!("{arch}.{key}"));
    let integer = |key: &str| value(key).and_then(|v| v.as_u64());
    let float = |key: &str| value(key).and_then(|v| v.as_f64());
    let missing = |key: &str| header.invalid(format!("no {arch}.{key} in the metadata"));
    let required = |key: &str| integer(key).ok_or_else(|| missing(key));
    let embedding = header
        .tensors
        .iter()
        .find(|tensor| tensor.name == "token_embd.weight")
        .ok_or_else(|| header.invalid("no token_embd.weight tensor"))?;
    let has_tensor = |name: &str| header.tensors.iter().any(|tensor| tensor.name == name);
    let mut config = Map::new();
    let model_type = if arch == "mistral" { "llama" } else { arch };
    config.insert("model_type".into(), json!(model_type));
    config.insert("hidden_size".into(), json!(required("embedding_length")?));
    config.insert(
        "intermediate_size".into(),
        json!(required("feed_forward_length")?),
    );
    config.insert("num_hidden_layers".into(), json!(required("block_count")?));
    let heads = required("attention.head_count")?;
    config.insert("num_attention_heads".into(), json!(heads));
    config.insert(
        "num_key_value_heads".into(),
        json!(integer("attention.head_count_kv").unwrap_or(heads)),
    );
    if let Some(head_dim) = integer("attention.key_length") {
        config.insert("head_dim".into(), json!(head_dim));
    }
    // The table's rows, not the tokenizer's length: converters pad the embedding.
    config.insert(
        "vocab_size".into(),
        json!(embedding.dims.get(1).copied().unwrap_or(0)),
    );
    config.insert(
        "rms_norm_eps".into(),
        json!(
            float("attention.layer_norm_rms_epsilon")
                .ok_or_else(|| missing("attention.layer_norm_rms_epsilon"))?
        ),
    );
    if let Some(theta) = float("rope.freq_base") {
        config.insert("rope_theta".into(), json!(theta));
    }
    config.insert("rope_traditional".into(), json!(model_type == "llama"));
    if let Some(context) = integer("context_length") {
        config.insert("max_position_embeddings".into(), json!(context));
    }
    let scaling = header
        .get(&format!("{arch}.rope.scaling.type"))
        .and_then(|v| v.as_str());
    match scaling {
        None | Some("none") => {}
        Some("linear") => {
            config.insert(
                "rope_scaling".into(),
                json!({
                    "type": "linear",
                    "factor": float("rope.scaling.factor").ok_or_else(|| missing("rope.scaling.factor"))?,
                }),
            );
        }
        Some(other) => {
            return Err(header.invalid(format!(
                "rope scaling {other:?} is not served (supported: none, linear)"
            )));
        }
    }
    config.insert(
        "tie_word_embeddings".into(),
        json!(!has_tensor("output.weight")),
    );
    config.insert(
        "attention_bias".into(),
        json!(has_tensor("blk.0.attn_q.bias")),
    );
    Ok(Json::Object(config))
}
