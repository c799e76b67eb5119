//! Ministral 3's rotation, from the converter's `rope.scaling.*` keys.

use serde_json::{Value as Json, json};

use super::{Keys, rope_scaling};
use crate::gguf::header::GgufError;

/// Ministral 3's `rope_parameters`: YaRN (or none) from `rope.scaling.*`, with
/// `rope.scaling.yarn_log_multiplier` as `mscale_all_dim` and `attention.temperature_scale` as
/// `llama_4_scaling_beta`, as the converter writes them (no temperature scale: queries unscaled).
pub(super) fn ministral3_rope(keys: &Keys, theta: f64, context: u64) -> Result<Json, GgufError> {
    let original = keys
        .integer("rope.scaling.original_context_length")
        .unwrap_or(context);
    let mut rope = json!({
        "rope_type": "default",
        "rope_theta": theta,
        "original_max_position_embeddings": original,
        "llama_4_scaling_beta": keys.float("attention.temperature_scale").unwrap_or(0.0),
    });
    if let Some(Json::Object(yarn)) = rope_scaling(keys)? {
        if yarn.get("type").and_then(Json::as_str) != Some("yarn") {
            return Err(keys
                .header
                .invalid("mistral3 rope scaling other than YaRN is not served"));
        }
        for (key, value) in yarn {
            rope[if key == "type" {
                "rope_type".to_owned()
            } else {
                key
            }] = value;
        }
        rope["mscale_all_dim"] = json!(
            keys.float("rope.scaling.yarn_log_multiplier")
                .unwrap_or(0.0)
        );
    }
    Ok(rope)
}
