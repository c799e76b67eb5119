//! Tool-call ids in the shape a template demands. Mistral's templates refuse any id that is not
//! nine letters or digits ("Tool call IDs should be alphanumeric strings with length 9!"), while
//! clients send back whatever ids they were given (`call_...` from corral, others from elsewhere).
//! So before rendering, each id is replaced by nine characters derived from it: the same id
//! always maps to the same nine, so a call and its result still match.
//!
//! Kimi K2 was trained on ids of its own, `functions.NAME:INDEX` with the index counting the
//! conversation's calls, which its template writes both after each call and before each result
//! (`## Return of ID`); the conversation's ids are rewritten into that shape the same way.

use std::collections::HashMap;

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

/// `messages` with every assistant call's `id` as Kimi K2 writes it, `functions.NAME:INDEX` for
/// the conversation's INDEXth call, and every tool result's `tool_call_id` as its call's.
pub fn kimi_call_ids(messages: &[Value]) -> Vec<Value> {
    let mut renamed: HashMap<String, String> = HashMap::new();
    let mut index = 0;
    messages
        .iter()
        .map(|message| {
            let mut message = message.clone();
            if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
                for call in calls {
                    let name = call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown");
                    let kimi = format!("functions.{name}:{index}");
                    index += 1;
                    if let Some(Value::String(id)) = call.get_mut("id") {
                        renamed.insert(id.clone(), kimi.clone());
                    }
                    if let Value::Object(call) = call {
                        call.insert("id".to_owned(), Value::String(kimi));
                    }
                }
            }
            if let Some(Value::String(id)) = message.get_mut("tool_call_id")
                && let Some(kimi) = renamed.get(id.as_str())
            {
                *id = kimi.clone();
            }
            message
        })
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

    #[test]
    fn kimi_ids_count_the_conversations_calls_and_results_follow_them() {
        let call = |id: &str, name: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}});
        let messages = [
            json!({"role": "assistant", "tool_calls": [call("call_a", "f"), call("call_b", "g")]}),
            json!({"role": "tool", "tool_call_id": "call_b", "content": "2"}),
            json!({"role": "tool", "tool_call_id": "call_a", "content": "1"}),
            json!({"role": "assistant", "tool_calls": [call("call_c", "f")]}),
            json!({"role": "tool", "tool_call_id": "call_c", "content": "3"}),
            json!({"role": "tool", "tool_call_id": "elsewhere", "content": "4"}),
        ];
        let rewritten = kimi_call_ids(&messages);
        let ids: Vec<&Value> = [(0, 0), (0, 1), (3, 0)]
            .iter()
            .map(|&(message, call)| &rewritten[message]["tool_calls"][call]["id"])
            .collect();
        assert_eq!(ids, ["functions.f:0", "functions.g:1", "functions.f:2"]);
        let results: Vec<&Value> = [1, 2, 4, 5]
            .iter()
            .map(|&message| &rewritten[message]["tool_call_id"])
            .collect();
        assert_eq!(
            results,
            [
                "functions.g:1",
                "functions.f:0",
                "functions.f:2",
                "elsewhere"
            ]
        );
    }
}
