//! Phi-4-mini's conversation before rendering. Its released template takes the tools only as a
//! system message's `tools` field, a JSON string it writes between `<|tool|>` and `<|/tool|>`
//! (the model card passes `json.dumps` of the functions there), and writes every other message
//! as `<|role|>` + content + `<|end|>`, a past call's turn too. So the functions go into the
//! first system message as that string (a system message is added in front when there is
//! none), and each past call into the assistant's text in the notation the model writes
//! (`ToolFormat::Phi4Mini`). Results stay `tool` turns, which the template writes as
//! `<|tool|>RESULT<|end|>`.

use serde_json::{Value, json};

use super::fallback::{call_arguments, python_json, text_of};
use super::markers::FUNCTOOLS;

/// The system prompt of the model card's tool example, for a conversation without one.
const SYSTEM_WITH_TOOLS: &str = "You are a helpful assistant with some tools.";

/// `messages` with `tools` (when there are any) as the first system message's `tools` string,
/// past calls as text, and every content a string, as the template concatenates it.
pub fn phi4_messages(messages: &[Value], tools: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = messages.iter().map(with_calls_as_text).collect();
    if tools.is_empty() {
        return out;
    }
    let functions: Vec<Value> = tools
        .iter()
        .map(|tool| tool.get("function").unwrap_or(tool).clone())
        .collect();
    let listed = Value::String(python_json(&Value::Array(functions)));
    let is_system = |message: &Value| message.get("role").and_then(Value::as_str) == Some("system");
    match out.iter_mut().find(|message| is_system(message)) {
        Some(Value::Object(system)) => {
            system.insert("tools".into(), listed);
        }
        _ => out.insert(
            0,
            json!({"role": "system", "content": SYSTEM_WITH_TOOLS, "tools": listed}),
        ),
    }
    out
}

/// The message with its content as text and its calls, if any, after it as
/// `functools[{"name": ..., "arguments": {...}}, ...]`.
fn with_calls_as_text(message: &Value) -> Value {
    let mut object = message.as_object().cloned().unwrap_or_default();
    let mut text = text_of(object.get("content"));
    let calls = object.remove("tool_calls");
    let calls: Vec<String> = calls
        .as_ref()
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|call| {
            let function = call.get("function").unwrap_or(call);
            let name = function.get("name").cloned().unwrap_or(Value::Null);
            format!(
                "{{\"name\": {}, \"arguments\": {}}}",
                python_json(&name),
                python_json(&call_arguments(function))
            )
        })
        .collect();
    if !calls.is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!("{FUNCTOOLS}{}]", calls.join(", ")));
    }
    object.insert("content".into(), text.into());
    Value::Object(object)
}
