//! LFM2 and LFM2-MoE (`lfm2`, `lfm2moe`): llama.cpp tells a short-convolution layer from an
//! attention layer by its `attention.head_count_kv` of 0, and writes the convolution's length as
//! `shortconv.l_cache` and the already adjusted MLP width as `feed_forward_length`.
//!
//! llama.cpp hard-codes the rest: no convolution bias, and LFM2-MoE's experts chosen by sigmoid
//! score plus the `exp_probs_b` bias, their weights always renormalized.

use serde_json::{Map, Value as Json, json};

use super::Keys;
use crate::gguf::header::GgufError;

pub(super) fn lfm2(
    keys: &Keys,
    config: &mut Map<String, Json>,
    layers: u64,
) -> Result<(), GgufError> {
    let header = keys.header;
    if keys
        .integer("attention.sliding_window")
        .is_some_and(|window| window > 0)
    {
        return Err(header.invalid(format!(
            "{} with sliding-window attention is not served",
            keys.arch
        )));
    }
    // LFM2.5's bidirectional embedding models.
    if keys.boolean("attention.causal") == Some(false) {
        return Err(header.invalid(format!(
            "{} without causal attention (an embedding model) is not served",
            keys.arch
        )));
    }
    let kv_heads = keys
        .per_layer("attention.head_count_kv", layers)
        .ok_or_else(|| keys.missing("attention.head_count_kv"))?;
    let kinds: Vec<&str> = kv_heads
        .iter()
        .map(|&heads| if heads == 0 { "conv" } else { "full_attention" })
        .collect();
    let mut put = |key: &str, value: Json| {
        config.insert(key.into(), value);
    };
    put("num_key_value_heads", json!(kv_heads.iter().max()));
    put("layer_types", json!(kinds));
    put("conv_L_cache", json!(keys.required("shortconv.l_cache")?));
    put("conv_bias", json!(false));
    put("block_auto_adjust_ff_dim", json!(false));
    if keys.arch == "lfm2moe" {
        if let Some(gating) = keys.integer("expert_gating_func")
            && gating != 2
        {
            return Err(header.invalid(format!(
                "lfm2moe.expert_gating_func {gating}: LFM2-MoE routes by sigmoid (2)"
            )));
        }
        put("model_type", json!("lfm2_moe"));
        for (key, value) in keys.experts("num_experts")? {
            put(key, value);
        }
        put(
            "moe_intermediate_size",
            json!(keys.required("expert_feed_forward_length")?),
        );
        put(
            "num_dense_layers",
            json!(keys.integer("leading_dense_block_count").unwrap_or(0)),
        );
        put("use_expert_bias", json!(true));
        put("norm_topk_prob", json!(true));
        // llama.cpp skips a scale of 0 (absent) or 1.
        let scale = keys
            .float("expert_weights_scale")
            .filter(|&scale| scale != 0.0)
            .unwrap_or(1.0);
        put("routed_scaling_factor", json!(scale));
    }
    Ok(())
}
