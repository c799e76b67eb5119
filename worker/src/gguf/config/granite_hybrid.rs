//! Granite 4's hybrids (`granitehybrid`): llama.cpp keeps no layer list, only per-layer KV heads,
//! so a layer with KV heads attends and the rest are Mamba-2 mixers. The mixer's sizes come from
//! `ssm.*` (`time_step_rank` is its head count). The converter turns RoPE off for every hybrid
//! but Bamba by writing `rope.scaling.finetuned` false: that is Granite 4's
//! `position_embedding_type` `nope`.

use serde_json::{Map, Value as Json, json};

use super::super::header::GgufError;
use super::Keys;

pub(super) fn granite_hybrid(
    keys: &Keys,
    config: &mut Map<String, Json>,
    layers: u64,
) -> Result<(), GgufError> {
    let kv_heads = keys
        .per_layer("attention.head_count_kv", layers)
        .ok_or_else(|| keys.missing("attention.head_count_kv"))?;
    let mut put = |key: &str, value: Json| {
        config.insert(key.into(), value);
    };
    let kinds: Vec<&str> = kv_heads
        .iter()
        .map(|&heads| if heads > 0 { "attention" } else { "mamba" })
        .collect();
    put("layer_types", json!(kinds));
    put(
        "num_key_value_heads",
        json!(kv_heads.iter().copied().max().unwrap_or(0).max(1)),
    );
    let rope = keys.boolean("rope.scaling.finetuned").unwrap_or(true);
    put(
        "position_embedding_type",
        json!(if rope { "rope" } else { "nope" }),
    );
    let heads = keys.required("ssm.time_step_rank")?;
    put("mamba_n_heads", json!(heads));
    put(
        "mamba_d_head",
        json!(keys.required("ssm.inner_size")? / heads.max(1)),
    );
    put("mamba_d_state", json!(keys.required("ssm.state_size")?));
    put("mamba_n_groups", json!(keys.required("ssm.group_count")?));
    put("mamba_d_conv", json!(keys.required("ssm.conv_kernel")?));
    let mamba_layer = kinds.iter().position(|&kind| kind == "mamba").unwrap_or(0);
    put(
        "mamba_conv_bias",
        json!(keys.has_tensor(&format!("blk.{mamba_layer}.ssm_conv1d.bias"))),
    );
    put(
        "mamba_proj_bias",
        json!(keys.has_tensor(&format!("blk.{mamba_layer}.ssm_in.bias"))),
    );
    let experts = keys.integer("expert_count").unwrap_or(0);
    put("num_local_experts", json!(experts));
    if experts > 0 {
        put(
            "num_experts_per_tok",
            json!(keys.required("expert_used_count")?),
        );
    }
    // The shared MLP's width, the only MLP of a Granite 4 without experts.
    let shared = keys
        .integer("expert_shared_feed_forward_length")
        .or_else(|| keys.first_integer("feed_forward_length"))
        .ok_or_else(|| keys.missing("feed_forward_length"))?;
    put("shared_intermediate_size", json!(shared));
    for (name, value) in keys.granite_multipliers() {
        put(name, value);
    }
    Ok(())
}
