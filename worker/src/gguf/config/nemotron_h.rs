//! Nemotron-H (`nemotron_h`) and Nemotron 3 with experts (`nemotron_h_moe`): llama.cpp keeps no
//! layer pattern, only per-layer widths, so the pattern is read back from them: a layer with
//! KV heads attends (`*`), one with a feed-forward width is the MLP (`-`) or the experts (`E`),
//! the rest are Mamba-2 mixers (`M`). The mixer's sizes come from `ssm.*` (`time_step_rank` is
//! its head count); llama.cpp does not clamp the time step, so neither does the translation
//! (`time_step_min` 0, where transformers clamps at 0.001).

use serde_json::{Map, Value as Json, json};

use super::super::header::GgufError;
use super::Keys;

pub(super) fn config(keys: &Keys, embedding_rows: u64) -> Result<Json, GgufError> {
    let layers = keys.required("block_count")?;
    let experts = keys.arch == "nemotron_h_moe";
    let kv_heads = keys
        .per_layer("attention.head_count_kv", layers)
        .ok_or_else(|| keys.missing("attention.head_count_kv"))?;
    let widths = keys
        .per_layer("feed_forward_length", layers)
        .ok_or_else(|| keys.missing("feed_forward_length"))?;
    let pattern: String = kv_heads
        .iter()
        .zip(&widths)
        .map(|(&heads, &width)| match (heads, width) {
            (1.., _) => '*',
            (0, 1..) if experts => 'E',
            (0, 1..) => '-',
            (0, 0) => 'M',
        })
        .collect();
    let heads = keys.required("ssm.time_step_rank")?;
    let inner = keys.required("ssm.inner_size")?;
    let eps = keys
        .float("attention.layer_norm_rms_epsilon")
        .or_else(|| keys.float("attention.layer_norm_epsilon"))
        .ok_or_else(|| keys.missing("attention.layer_norm_epsilon"))?;
    let conv_bias =
        (0..layers).any(|layer| keys.has_tensor(&format!("blk.{layer}.ssm_conv1d.bias")));
    let mut config = Map::new();
    let mut put = |key: &str, value: Json| {
        config.insert(key.into(), value);
    };
    put("model_type", json!("nemotron_h"));
    let hidden = keys.required("embedding_length")?;
    let attention_heads = keys.required("attention.head_count")?;
    put("hidden_size", json!(hidden));
    put("num_hidden_layers", json!(layers));
    put("hybrid_override_pattern", json!(pattern));
    put("num_attention_heads", json!(attention_heads));
    put(
        "num_key_value_heads",
        json!(kv_heads.iter().copied().max().unwrap_or(0).max(1)),
    );
    // Always written: llama.cpp's default (hidden / heads) is not transformers' (128).
    let head_dim = keys
        .integer("attention.key_length")
        .unwrap_or(hidden / attention_heads.max(1));
    put("head_dim", json!(head_dim));
    put("vocab_size", json!(embedding_rows));
    put("layer_norm_epsilon", json!(eps));
    put(
        "tie_word_embeddings",
        json!(!keys.has_tensor("output.weight")),
    );
    if let Some(context) = keys.integer("context_length") {
        put("max_position_embeddings", json!(context));
    }
    put("mamba_num_heads", json!(heads));
    put("mamba_head_dim", json!(inner / heads.max(1)));
    put("ssm_state_size", json!(keys.required("ssm.state_size")?));
    put("n_groups", json!(keys.required("ssm.group_count")?));
    put("conv_kernel", json!(keys.required("ssm.conv_kernel")?));
    put("use_conv_bias", json!(conv_bias));
    put("time_step_min", json!(0.0));
    if experts {
        for (key, value) in keys.experts("n_routed_experts")? {
            put(key, value);
        }
        put(
            "moe_intermediate_size",
            json!(keys.required("expert_feed_forward_length")?),
        );
        put(
            "n_shared_experts",
            json!(keys.integer("expert_shared_count").unwrap_or(0)),
        );
        if let Some(width) = keys.integer("expert_shared_feed_forward_length") {
            put("moe_shared_expert_intermediate_size", json!(width));
        }
        put(
            "norm_topk_prob",
            json!(keys.boolean("expert_weights_norm").unwrap_or(false)),
        );
        put(
            "routed_scaling_factor",
            json!(keys.float("expert_weights_scale").unwrap_or(1.0)),
        );
        for (key, value) in keys.expert_groups() {
            put(key, value);
        }
    } else {
        put(
            "intermediate_size",
            json!(widths.iter().copied().max().unwrap_or(0)),
        );
    }
    Ok(Json::Object(config))
}
