//! Gemma 4's tool results. Its template reads them from the calling turn's `tool_responses`
//! (`{name, response}`) and writes them right after the calls, inside the same model turn, as
//! `<|tool_response>response:NAME{...}<tool_response|>`: the shape Gemma 4 was trained on. A
//! `tool` message of its own would render as a turn of a role the model never saw.

use serde_json::{Map, Value, json};

/// `messages` with each run of `tool` results folded into the assistant turn whose calls they
/// answer; a result that follows no call stays as it is.
pub fn gemma4_tool_responses(messages: &[Value]) -> Vec<Value> {
    let mut folded: Vec<Value> = Vec::with_capacity(messages.len());
    for message in messages {
        let caller = folded.last_mut().filter(|last| calls(last).is_some());
        match (message.get("role").and_then(Value::as_str), caller) {
            (Some("tool"), Some(caller)) => {
                let response = json!({
                    "name": called_name(caller, message),
                    "response": response(message.get("content")),
                });
                if let Value::Object(caller) = caller {
                    let responses = caller
                        .entry("tool_responses")
                        .or_insert_with(|| Value::Array(Vec::new()));
                    if let Value::Array(responses) = responses {
                        responses.push(response);
                    }
                }
            }
            _ => folded.push(message.clone()),
        }
    }
    folded
}

fn calls(message: &Value) -> Option<&Vec<Value>> {
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .filter(|calls| !calls.is_empty())
}

/// The name of the call a result answers, by its `tool_call_id`; else the result's own `name`.
fn called_name(caller: &Value, result: &Value) -> String {
    let id = result.get("tool_call_id").and_then(Value::as_str);
    calls(caller)
        .into_iter()
        .flatten()
        .find(|call| id.is_some() && call.get("id").and_then(Value::as_str) == id)
        .and_then(|call| call.pointer("/function/name"))
        .or_else(|| result.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned()
}

/// A result's content as the template's `response`: a JSON object's text becomes the object
/// (rendered key by key), anything else the text itself (text parts joined).
fn response(content: Option<&Value>) -> Value {
    let text = match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        Some(other @ Value::Object(_)) => return other.clone(),
        _ => String::new(),
    };
    match serde_json::from_str::<Map<String, Value>>(&text) {
        Ok(object) => Value::Object(object),
        Err(_) => Value::String(text),
    }
}
