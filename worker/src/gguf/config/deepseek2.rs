//! DeepSeek V2 and V3, Kimi K2 and GLM-4.7-Flash (`deepseek2`): multi-head latent attention,
//! which llama.cpp's converter writes as one key-value head whose key is the latent and the
//! rotary key (`key_length` = `kv_lora_rank` + `rope.dimension_count`), the per-head sizes in
//! `key_length_mla` and `value_length_mla` (older files: `key_length` and `value_length`
//! themselves, with the unsplit `attn_kv_b`). Queries come from `attn_q_a`/`attn_q_b` or, in the
//! lite models, one `attn_q`.
//!
//! What llama.cpp hard-codes or defaults, so does this translation:
//! - `expert_gating_func` absent is softmax (DeepSeek V2's), but sigmoid for GLM-4.7-Flash
//!   (47 or 48 layers, 154880 tokens); the converter writes it only from a config's
//!   `scoring_func`, which transformers' own DeepSeek V3 config does not keep;
//! - `expert_weights_norm` absent is false, an `expert_weights_scale` of 0 (absent) none;
//! - every layer past `leading_dense_block_count` routes;
//! - the low-rank norms take the model's epsilon;
//! - `rope.scaling.yarn_log_multiplier` is 0.1 × `mscale_all_dim`, and YaRN's `mscale` is taken
//!   to equal `mscale_all_dim` unless that is 1.
//!
//! The model is `deepseek_v3`, or `glm4_moe_lite` (the same, its low-rank norms at the model's
//! epsilon) where the file's epsilon is not DeepSeek's fixed 1e-6.

use serde_json::{Map, Value as Json, json};

use super::{Keys, rope_scaling};
use crate::gguf::header::GgufError;

/// DeepSeek's fixed epsilon of the low-rank norms.
const DEEPSEEK_LORA_EPS: f64 = 1e-6;

pub(super) fn deepseek2(
    keys: &Keys,
    config: &mut Map<String, Json>,
    layers: u64,
) -> Result<(), GgufError> {
    let header = keys.header;
    if keys
        .float("attention.temperature_scale")
        .is_some_and(|scale| scale != 0.0)
    {
        return Err(header.invalid(
            "deepseek2 with a query temperature (attention.temperature_scale) is not served",
        ));
    }
    // GLM-4.7-Flash's multi-token-prediction layer follows the trunk; it is not run.
    let layers = layers.saturating_sub(keys.integer("nextn_predict_layers").unwrap_or(0));
    let eps = keys
        .float("attention.layer_norm_rms_epsilon")
        .ok_or_else(|| keys.missing("attention.layer_norm_rms_epsilon"))?;
    let heads = keys.required("attention.head_count")?;
    let rope_dim = keys.required("rope.dimension_count")?;
    let (key_length, value_length) = match (
        keys.integer("attention.key_length_mla"),
        keys.integer("attention.value_length_mla"),
    ) {
        (Some(key), Some(value)) => (key, value),
        _ => (
            keys.required("attention.key_length")?,
            keys.required("attention.value_length")?,
        ),
    };
    let nope = key_length.checked_sub(rope_dim).filter(|&nope| nope > 0);
    let nope = nope.ok_or_else(|| {
        header.invalid(format!(
            "deepseek2 key length {key_length} leaves no room beside {rope_dim} rotary channels"
        ))
    })?;
    let vocab = config.get("vocab_size").and_then(Json::as_u64).unwrap_or(0);
    let sigmoid = match keys.integer("expert_gating_func") {
        Some(1) => false,
        Some(2) => true,
        // llama.cpp's fallback: GLM-4.7-Flash's files predate the key.
        None => matches!(layers, 47 | 48) && vocab == 154_880,
        Some(other) => {
            return Err(header.invalid(format!(
                "deepseek2.expert_gating_func {other} is not served (1 softmax, 2 sigmoid)"
            )));
        }
    };
    let lora_eps_is_deepseeks = eps as f32 == DEEPSEEK_LORA_EPS as f32;
    let mut put = |key: &str, value: Json| {
        config.insert(key.into(), value);
    };
    put(
        "model_type",
        json!(if lora_eps_is_deepseeks {
            "deepseek_v3"
        } else {
            "glm4_moe_lite"
        }),
    );
    put("num_hidden_layers", json!(layers));
    put("num_key_value_heads", json!(heads));
    put("head_dim", json!(rope_dim));
    put("qk_rope_head_dim", json!(rope_dim));
    put("qk_nope_head_dim", json!(nope));
    put("v_head_dim", json!(value_length));
    put(
        "kv_lora_rank",
        json!(keys.required("attention.kv_lora_rank")?),
    );
    // Written either way: transformers' default is a low-rank query.
    let q_lora_rank = if keys.has_tensor("blk.0.attn_q_a.weight") {
        json!(keys.required("attention.q_lora_rank")?)
    } else {
        Json::Null
    };
    put("q_lora_rank", q_lora_rank);
    put(
        "first_k_dense_replace",
        json!(keys.integer("leading_dense_block_count").unwrap_or(0)),
    );
    put("moe_layer_freq", json!(1));
    if keys.integer("expert_count").is_some_and(|count| count > 0) {
        put("n_routed_experts", json!(keys.required("expert_count")?));
        put(
            "num_experts_per_tok",
            json!(keys.required("expert_used_count")?),
        );
        put(
            "moe_intermediate_size",
            json!(
                keys.first_integer("expert_feed_forward_length")
                    .ok_or_else(|| keys.missing("expert_feed_forward_length"))?
            ),
        );
        put(
            "n_shared_experts",
            json!(keys.integer("expert_shared_count").unwrap_or(0)),
        );
        put(
            "scoring_func",
            json!(if sigmoid { "sigmoid" } else { "softmax" }),
        );
        put(
            "norm_topk_prob",
            json!(keys.boolean("expert_weights_norm").unwrap_or(false)),
        );
        let scale = keys
            .float("expert_weights_scale")
            .filter(|&scale| scale != 0.0)
            .unwrap_or(1.0);
        put("routed_scaling_factor", json!(scale));
        for (key, value) in keys.expert_groups() {
            put(key, value);
        }
    }
    if let Some(scaling) = yarn(keys)? {
        put("rope_scaling", scaling);
    }
    Ok(())
}

/// YaRN as llama.cpp applies it to `deepseek2`: rotary channels scaled by
/// `mscale(mscale) / mscale(mscale_all_dim)` and the scores by `mscale(mscale)²`, with
/// `mscale_all_dim` = `yarn_log_multiplier` / 0.1 and `mscale` equal to it unless it is 1. The
/// model scales the scores by `mscale(mscale_all_dim)²`, the same when the multiplier is there;
/// without it llama.cpp scales both the channels and the scores by `mscale(1)` = 1 + 0.1 ln f,
/// which `mscale_all_dim` 1 and `mscale` 2 + 0.1 ln f give.
fn yarn(keys: &Keys) -> Result<Option<Json>, GgufError> {
    let Some(Json::Object(mut yarn)) = rope_scaling(keys)? else {
        return Ok(None);
    };
    if yarn.get("type").and_then(Json::as_str) != Some("yarn") {
        return Ok(Some(Json::Object(yarn)));
    }
    let factor = yarn.get("factor").and_then(Json::as_f64).unwrap_or(1.0);
    // In f32, as llama.cpp undoes the converter's 0.1.
    let all_dims = keys
        .float("rope.scaling.yarn_log_multiplier")
        .map_or(0.0, |multiplier| f64::from(multiplier as f32 / 0.1));
    let (mscale, mscale_all_dim) = if all_dims == 0.0 {
        (2.0 + 0.1 * factor.ln(), 1.0)
    } else if all_dims == 1.0 {
        (1.0, 1.0)
    } else {
        (all_dims, all_dims)
    };
    yarn.insert("mscale".into(), json!(mscale));
    yarn.insert("mscale_all_dim".into(), json!(mscale_all_dim));
    Ok(Some(Json::Object(yarn)))
}
