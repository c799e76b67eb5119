//! Llama 4's hyperparameters, and what llama.cpp hard-codes for it.

use serde_json::{Map, Value as Json, json};

use super::Keys;
use crate::gguf::header::GgufError;

/// Llama 4 (Scout, Maverick): `feed_forward_length` is the dense layers' MLP
/// (`intermediate_size_mlp`), `expert_feed_forward_length` the experts' and the shared expert's.
/// llama.cpp hard-codes the rest: attention in chunks of 8192 positions and no RoPE in every
/// fourth layer, whose queries are scaled by a temperature (floor 8192, scale 0.1), and the
/// rotated layers' queries and keys L2-normed but in the 128-expert Maverick. Llama 3 rope
/// scaling is the `rope_freqs` tensor, which the model reads.
pub(super) fn llama4(
    keys: &Keys,
    config: &mut Map<String, Json>,
    feed_forward: u64,
) -> Result<(), GgufError> {
    if keys.integer("attention.sliding_window") == Some(0) {
        return Err(keys.header.invalid(
            "llama4 without chunked attention (MobileLLM, sliding_window 0) is not served as GGUF",
        ));
    }
    let experts = keys.required("expert_count")?;
    let mut put = |key: &str, value: Json| {
        config.insert(key.into(), value);
    };
    put("model_type", json!("llama4_text"));
    put("intermediate_size_mlp", json!(feed_forward));
    put(
        "intermediate_size",
        json!(keys.required("expert_feed_forward_length")?),
    );
    for (key, value) in keys.experts("num_local_experts")? {
        put(key, value);
    }
    put(
        "interleave_moe_layer_step",
        json!(keys.required("interleave_moe_layer_step")?),
    );
    put("attention_chunk_size", json!(8192));
    put("attn_temperature_tuning", json!(true));
    put("floor_scale", json!(8192));
    put("attn_scale", json!(0.1));
    put("use_qk_norm", json!(experts != 128));
    Ok(())
}
