//! Tool-call ids in the shape a template demands. Mistral's templates refuse any id that is not
//! nine letters or digits ("Tool call IDs should be alphanumeric strings with length 9!"), while
//! clients send back whatever ids they were given (`call_...` from corral, others from elsewhere).
//! So before rendering, each id is replaced by nine characters derived from it: the same id
//! always maps to the same nine, so a call and its result still match.

use serde_json::Value;
use sha2::{Digest, Sha256};

const MISTRAL_ID_LEN: usize = 9;
const ALPHANUMERIC: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// `messages` with every assistant call's `id` and every tool result's `tool_call_id` in
/// Mistral's shape; ids already in it are kept.
pub fn mistral_call_ids(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .map(|message| {
            let mut message = message.clone();
            if let Some(Value::String(id)) = message.get_mut("tool_call_id") {
                *id = mistral_id(id);
            }
            if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
                for call in calls {
                    if let Some(Value::String(id)) = call.get_mut("id") {
                        *id = mistral_id(id);
                    }
                }
            }
            message
        })
        .collect()
}

fn mistral_id(id: &str) -> String {
    if id.len() == MISTRAL_ID_LEN && id.bytes().all(|byte| byte.is_ascii_alphanumeric()) {
        return id.to_owned();
    }
    Sha256::digest(id.as_bytes())
        .iter()
        .take(MISTRAL_ID_LEN)
        .map(|&byte| char::from(ALPHANUMERIC[usize::from(byte) % ALPHANUMERIC.len()]))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_call_and_its_result_keep_matching_ids_of_nine_alphanumerics() {
        let messages = [
            json!({"role": "assistant", "tool_calls": [
                {"id": "call_0123456789abcdef01234567", "type": "function",
                 "function": {"name": "f", "arguments": {}}},
                {"id": "abcDEF123", "type": "function", "function": {"name": "g", "arguments": {}}},
            ]}),
            json!({"role": "tool", "tool_call_id": "call_0123456789abcdef01234567", "content": "1"}),
            json!({"role": "tool", "tool_call_id": "abcDEF123", "content": "2"}),
            json!({"role": "user", "content": "call_0123456789abcdef01234567"}),
        ];
        let rewritten = mistral_call_ids(&messages);
        let first = rewritten[0]["tool_calls"][0]["id"].as_str().unwrap();
        assert_eq!(first.len(), 9);
        assert!(
            first.bytes().all(|byte| byte.is_ascii_alphanumeric()),
            "{first}"
        );
        assert_eq!(rewritten[1]["tool_call_id"], first);
        assert_eq!(rewritten[0]["tool_calls"][1]["id"], "abcDEF123");
        assert_eq!(rewritten[2]["tool_call_id"], "abcDEF123");
        assert_eq!(rewritten[3], messages[3], "content is never touched");
    }
}
