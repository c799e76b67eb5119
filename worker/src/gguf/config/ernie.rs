//! ERNIE 4.5 MoE's hyperparameters.

use serde_json::{Map, Value as Json, json};

use super::Keys;
use crate::gguf::header::GgufError;

/// ERNIE 4.5 MoE: dense layers lead (`leading_dense_block_count`), then every
/// `interleave_moe_layer_step`-th layer routes; `feed_forward_length` is the dense layers' MLP and
/// the shared experts together are `expert_shared_feed_forward_length` wide.
pub(super) fn ernie4_5_moe(keys: &Keys, config: &mut Map<String, Json>) -> Result<(), GgufError> {
    let inner = keys.required("expert_feed_forward_length")?;
    let shared_width = keys
        .integer("expert_shared_feed_forward_length")
        .unwrap_or(0);
    let mut put = |key: &str, value: Json| {
        config.insert(key.into(), value);
    };
    for (key, value) in keys.experts("moe_num_experts")? {
        put(key, value);
    }
    put("moe_intermediate_size", json!(inner));
    put("moe_num_shared_experts", json!(shared_width / inner.max(1)));
    put(
        "moe_layer_start_index",
        json!(keys.integer("leading_dense_block_count").unwrap_or(0)),
    );
    put(
        "moe_layer_interval",
        json!(keys.integer("interleave_moe_layer_step").unwrap_or(1)),
    );
    put("use_bias", json!(keys.has_tensor("blk.0.attn_q.bias")));
    Ok(())
}
