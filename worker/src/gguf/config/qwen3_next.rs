//! The gated-DeltaNet hybrids as llama.cpp's converter writes them: `qwen3next` (Qwen3-Next),
//! `qwen35` (Qwen3.5 dense) and `qwen35moe` (Qwen3.5 and 3.6 mixtures of experts).
//!
//! The linear attention's sizes are under `ssm.*`: `group_count` key heads of `state_size`,
//! `time_step_rank` value heads sharing `inner_size`, a `conv_kernel`-wide convolution. Which
//! layers are linear is `attention.recurrent_layers` (one flag a layer), else every layer but
//! each `full_attention_interval`-th. `block_count` counts the multi-token-prediction layers
//! (`nextn_predict_layers`) the converter appends, which are not run. Qwen3.5's multi-section
//! RoPE (`rope.dimension_sections`, interleaved) rotates text, whose positions are equal in
//! every section, as plain RoPE over `rope.dimension_count` channels, and an image's tokens by
//! their rows and columns where a projector gives the model images (`mmproj.rs`). llama.cpp
//! hard-codes the experts' renormalized top-k weights, and Qwen3.5's value heads in the
//! converter's tiled order.

use serde_json::{Map, Value as Json, json};

use super::{GgufError, Keys, Value, rotary_fraction};

/// Fills `config` (the keys every architecture has, `layers` from `block_count`) with the
/// family's own and returns it as the `config.json` the model reads: Qwen3.5's nested as its
/// wrapper's `text_config`.
pub(super) fn hybrid(
    keys: &Keys,
    mut config: Map<String, Json>,
    layers: u64,
    head_dim: u64,
) -> Result<Json, GgufError> {
    let trunk = layers.saturating_sub(keys.integer("nextn_predict_layers").unwrap_or(0));
    let value_heads = keys.required("ssm.time_step_rank")?;
    let kinds = layer_kinds(keys, trunk)?;
    let mut put = |key: &str, value: Json| {
        config.insert(key.into(), value);
    };
    put("num_hidden_layers", json!(trunk));
    put("layer_types", json!(kinds));
    put(
        "linear_num_key_heads",
        json!(keys.required("ssm.group_count")?),
    );
    put("linear_num_value_heads", json!(value_heads));
    put(
        "linear_key_head_dim",
        json!(keys.required("ssm.state_size")?),
    );
    put(
        "linear_value_head_dim",
        json!(keys.required("ssm.inner_size")? / value_heads.max(1)),
    );
    put(
        "linear_conv_kernel_dim",
        json!(keys.required("ssm.conv_kernel")?),
    );
    let mut rope = json!({
        "rope_type": "default",
        // llama.cpp's default base.
        "rope_theta": keys.float("rope.freq_base").unwrap_or(10_000.0),
        "partial_rotary_factor": rotary_fraction(keys, head_dim),
    });
    // Qwen3.5's sections (the fourth, always 0, is llama.cpp's padding), interleaved as
    // llama.cpp's `LLAMA_ROPE_TYPE_IMROPE` and transformers turn them: an image's tokens turn
    // by their rows and columns.
    let sections: Option<Vec<u64>> = keys
        .value("rope.dimension_sections")
        .and_then(Value::as_array)
        .and_then(|values| values.iter().take(3).map(Value::as_u64).collect());
    if let Some(sections) = sections.filter(|sections| sections.len() == 3) {
        rope["mrope_section"] = json!(sections);
        rope["mrope_interleaved"] = json!(true);
    }
    put("rope_parameters", rope);
    if let Some(experts) = keys.integer("expert_count").filter(|&count| count > 0) {
        put("num_experts", json!(experts));
        put(
            "num_experts_per_tok",
            json!(keys.required("expert_used_count")?),
        );
        put(
            "moe_intermediate_size",
            json!(keys.required("expert_feed_forward_length")?),
        );
        put(
            "shared_expert_intermediate_size",
            json!(keys.required("expert_shared_feed_forward_length")?),
        );
        // llama.cpp's `build_moe_ffn` for all three renormalizes the chosen experts' weights.
        put("norm_topk_prob", json!(true));
        put("mlp_only_layers", json!([]));
    }
    let wrapper = match keys.arch {
        "qwen35" => "qwen3_5",
        "qwen35moe" => "qwen3_5_moe",
        _ => return Ok(Json::Object(config)),
    };
    put("model_type", json!(format!("{wrapper}_text")));
    // The converter's `_LinearAttentionVReorderBase` moves Qwen3.5's value heads (in
    // `in_proj_qkv`, `_z`, `_a`, `_b`, `A_log`, `dt_bias`, conv1d and `out_proj`) from grouped
    // by key head to tiled; the layer reads them in that order rather than moving them back,
    // which `out_proj`'s columns could not be within a quantization group.
    put("linear_value_heads_tiled", json!(true));
    Ok(json!({"model_type": wrapper, "text_config": config}))
}

/// Each of the first `layers` layers' kind: llama.cpp's per-layer flags (true: linear), else
/// the last of every `full_attention_interval` (default 4) attends.
fn layer_kinds(keys: &Keys, layers: u64) -> Result<Vec<&'static str>, GgufError> {
    let kind = |linear: bool| {
        if linear {
            "linear_attention"
        } else {
            "full_attention"
        }
    };
    let Some(flags) = keys.value("attention.recurrent_layers") else {
        let interval = keys.integer("full_attention_interval").unwrap_or(4).max(1);
        return Ok((0..layers)
            .map(|layer| kind((layer + 1) % interval != 0))
            .collect());
    };
    let flags: Option<Vec<bool>> = flags
        .as_array()
        .and_then(|values| values.iter().map(Value::as_bool).collect());
    match flags {
        Some(flags) if flags.len() as u64 >= layers => {
            Ok(flags.into_iter().take(layers as usize).map(kind).collect())
        }
        _ => Err(keys.header.invalid(format!(
            "{}.attention.recurrent_layers must flag every layer",
            keys.arch
        ))),
    }
}
