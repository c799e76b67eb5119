//! Gemma 2's and Gemma 4's hyperparameters, as llama.cpp's converter writes them and its loader
//! reads them.

use serde_json::{Map, Value as Json, json};

use super::{Keys, layer_kinds, periodic_kinds, sliding_pattern};
use crate::gguf::header::GgufError;

/// Gemma 2: soft caps and window from the metadata (llama.cpp's defaults without them); every
/// other layer slides unless `attention.sliding_window_pattern` says otherwise; queries scaled by
/// the head size, by hidden/heads in the 46-layer 27B, as llama.cpp hard-codes.
pub(super) fn gemma2(
    keys: &Keys,
    config: &mut Map<String, Json>,
    layers: u64,
    heads: u64,
    head_dim: u64,
) -> Result<(), GgufError> {
    let kinds = periodic_kinds(layers, sliding_pattern(keys, 2)?);
    let hidden = keys.required("embedding_length")?;
    let scalar = if layers == 46 {
        hidden / heads.max(1)
    } else {
        head_dim
    };
    let mut put = |key: &str, value: Json| {
        config.insert(key.into(), value);
    };
    put("head_dim", json!(head_dim));
    put("layer_types", json!(kinds));
    put(
        "sliding_window",
        json!(keys.integer("attention.sliding_window").unwrap_or(4096)),
    );
    put("query_pre_attn_scalar", json!(scalar));
    for (key, default) in [
        ("attn_logit_softcapping", 50.0),
        ("final_logit_softcapping", 30.0),
    ] {
        put(key, json!(keys.float(key).unwrap_or(default)));
    }
    Ok(())
}

/// Gemma 4: llama.cpp's `key_length` is the full layers' head (`global_head_dim`), `_swa` the
/// sliding layers'; the sliding layers are per-layer flags; the KV-shared layers' MLP is twice as
/// wide in `feed_forward_length`'s per-layer widths; the full layers' proportional rotation is the
/// `rope_freqs` tensor (1 for each rotated pair, 1e30 for the pairs left unrotated); values equal
/// keys where a full layer has no `attn_v`; a router (`ffn_gate_inp`) means experts beside each
/// MLP (26B-A4B).
pub(super) fn gemma4(
    keys: &Keys,
    config: &mut Map<String, Json>,
    layers: u64,
    feed_forward: u64,
) -> Result<(), GgufError> {
    let header = keys.header;
    let full_head = keys.required("attention.key_length")?;
    let sliding_head = keys
        .integer("attention.key_length_swa")
        .unwrap_or(full_head);
    let kinds = layer_kinds(keys, layers)?;
    let shared = keys.integer("attention.shared_kv_layers").unwrap_or(0);
    let widths = keys
        .per_layer("feed_forward_length", layers)
        .ok_or_else(|| keys.missing("feed_forward_length"))?;
    let double_wide = widths
        .iter()
        .skip(layers.saturating_sub(shared) as usize)
        .any(|&width| width == 2 * feed_forward);
    let kv_heads = keys
        .per_layer("attention.head_count_kv", layers)
        .ok_or_else(|| keys.missing("attention.head_count_kv"))?;
    let first_full = kinds.iter().position(|kind| *kind == "full_attention");
    let global_kv_heads = first_full.map(|layer| kv_heads[layer]);
    let values_are_keys =
        first_full.is_some_and(|layer| !keys.has_tensor(&format!("blk.{layer}.attn_v.weight")));
    let factors = header.read_f32("rope_freqs.weight")?.unwrap_or_default();
    let rotated_pairs = factors.iter().filter(|&&factor| factor == 1.0).count();
    let full_rotated = if factors.is_empty() {
        1.0
    } else {
        (2 * rotated_pairs) as f64 / full_head.max(1) as f64
    };
    let per_layer_width = keys
        .integer("embedding_length_per_layer_input")
        .unwrap_or(0);
    let per_layer_vocab = header
        .tensors
        .iter()
        .find(|tensor| tensor.name == "per_layer_token_embd.weight")
        .and_then(|tensor| tensor.dims.get(1).copied());
    let mut put = |key: &str, value: Json| {
        config.insert(key.into(), value);
    };
    put("head_dim", json!(sliding_head));
    put("global_head_dim", json!(full_head));
    put("layer_types", json!(kinds));
    put(
        "sliding_window",
        json!(keys.required("attention.sliding_window")?),
    );
    put("num_kv_shared_layers", json!(shared));
    put("use_double_wide_mlp", json!(double_wide));
    put("num_key_value_heads", json!(kv_heads[0]));
    put("num_global_key_value_heads", json!(global_kv_heads));
    put("attention_k_eq_v", json!(values_are_keys));
    put(
        "rope_parameters",
        json!({
            "full_attention": {
                "rope_type": "proportional",
                "partial_rotary_factor": full_rotated,
                "rope_theta": keys.float("rope.freq_base").unwrap_or(1_000_000.0),
            },
            "sliding_attention": {
                "rope_type": "default",
                "rope_theta": keys.float("rope.freq_base_swa").unwrap_or(10_000.0),
            },
        }),
    );
    put(
        "final_logit_softcapping",
        json!(keys.float("final_logit_softcapping")),
    );
    if keys.has_tensor("blk.0.ffn_gate_inp.weight") {
        let [count, (_, top_k)] = keys.experts("num_experts")?;
        put(count.0, count.1);
        put("top_k_experts", top_k);
        put("enable_moe_block", json!(true));
        put(
            "moe_intermediate_size",
            json!(
                keys.first_integer("expert_feed_forward_length")
                    .ok_or_else(|| keys.missing("expert_feed_forward_length"))?
            ),
        );
    }
    put("hidden_size_per_layer_input", json!(per_layer_width));
    if let Some(vocab) = per_layer_vocab {
        put("vocab_size_per_layer_input", json!(vocab));
    }
    Ok(())
}
