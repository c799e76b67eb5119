//! A Responses `input` turned into the chat messages the worker's templates render: a string is
//! one user message; items are messages (`input_text`/`output_text` parts joined into one
//! string), `function_call` and `custom_tool_call` items (merged into the assistant turn before
//! them, as chat keeps a turn's calls together; a namespaced call under its flat name, a custom
//! call with its text as the `input` argument, as `tools.rs` offers them) and their outputs
//! (`tool` messages). `additional_tools` items carry tools, which `tools.rs` reads. Items that
//! record what hosted tools or the provider did (`reasoning`, `web_search_call`, `compaction`...)
//! are accepted and left out: chat templates drop past thinking, and corral ran none of them.
//!
//! Arguments stay JSON strings here, as chat clients send them; `messages::normalize` parses
//! them for the templates later, so the stored conversation keeps the client's text.

use serde::Deserialize;
use serde_json::{Value, json};

use super::tools::{custom_arguments, flat_name};
use crate::api::error::ApiError;

const ROLES: [&str; 4] = ["user", "system", "developer", "assistant"];

/// Items a client may replay that hold nothing a local model's prompt can use.
const LEFT_OUT: [&str; 20] = [
    "reasoning",
    "additional_tools",
    "compaction",
    "compaction_summary",
    "item_reference",
    "web_search_call",
    "file_search_call",
    "image_generation_call",
    "code_interpreter_call",
    "computer_call",
    "computer_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "tool_search_call",
    "tool_search_output",
    "mcp_list_tools",
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
    "ghost_snapshot",
];

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Input {
    Text(String),
    Items(Vec<Value>),
}

pub fn messages(input: Input) -> Result<Vec<Value>, ApiError> {
    let items = match input {
        Input::Text(text) => return Ok(vec![json!({"role": "user", "content": text})]),
        Input::Items(items) => items,
    };
    let mut messages: Vec<Value> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let field = |name: &str| item.get(name).and_then(Value::as_str);
        match field("type").unwrap_or("message") {
            "message" => messages.push(message(index, item)?),
            kind @ ("function_call" | "custom_tool_call") => {
                let name = required(index, field("name"), "name")?;
                let name = match field("namespace") {
                    Some(namespace) => flat_name(namespace, name),
                    None => name.to_owned(),
                };
                let arguments = if kind == "custom_tool_call" {
                    custom_arguments(required(index, field("input"), "input")?)
                } else {
                    required(index, field("arguments"), "arguments")?.to_owned()
                };
                let call = json!({
                    "id": required(index, field("call_id"), "call_id")?,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                });
                push_call(&mut messages, call);
            }
            "function_call_output" | "custom_tool_call_output" => messages.push(json!({
                "role": "tool",
                "tool_call_id": required(index, field("call_id"), "call_id")?,
                "content": text(index, item.get("output"), "output")?,
            })),
            kind if LEFT_OUT.contains(&kind) => {}
            other => {
                return Err(invalid(
                    index,
                    format!(
                        "input[{index}] has type `{other}`; supported are message, \
                         function_call, custom_tool_call, their outputs, additional_tools, and \
                         the records of hosted tools and reasoning (left out)"
                    ),
                    "type",
                ));
            }
        }
    }
    Ok(messages)
}

fn invalid(index: usize, message: String, field: &str) -> ApiError {
    ApiError::invalid(message, format!("input[{index}].{field}"))
}

fn required<'a>(index: usize, value: Option<&'a str>, field: &str) -> Result<&'a str, ApiError> {
    value.ok_or_else(|| {
        invalid(
            index,
            format!("input[{index}] needs a string `{field}`"),
            field,
        )
    })
}

fn message(index: usize, item: &Value) -> Result<Value, ApiError> {
    let role = match item.get("role").and_then(Value::as_str) {
        Some(role) if ROLES.contains(&role) => role,
        _ => {
            return Err(invalid(
                index,
                format!("input[{index}].role must be one of {}", ROLES.join(", ")),
                "role",
            ));
        }
    };
    let content = text(index, item.get("content"), "content")?;
    Ok(json!({"role": role, "content": content}))
}

/// Content as a string, or text parts (`input_text`, `output_text`) joined by newlines; other
/// parts (images, files) are refused, as no model here reads them.
fn text(index: usize, content: Option<&Value>, field: &str) -> Result<String, ApiError> {
    let parts = match content {
        Some(Value::String(text)) => return Ok(text.clone()),
        Some(Value::Array(parts)) => parts,
        _ => {
            return Err(invalid(
                index,
                format!("input[{index}].{field} must be a string or an array of text parts"),
                field,
            ));
        }
    };
    let mut texts = Vec::with_capacity(parts.len());
    for part in parts {
        let kind = part.get("type").and_then(Value::as_str);
        match (kind, part.get("text").and_then(Value::as_str)) {
            (Some("input_text" | "output_text" | "text"), Some(text)) => texts.push(text),
            _ => {
                return Err(invalid(
                    index,
                    format!(
                        "input[{index}].{field}: only input_text and output_text parts are \
                         supported, got {}",
                        kind.unwrap_or("a part without a type")
                    ),
                    field,
                ));
            }
        }
    }
    Ok(texts.join("\n"))
}

/// Adds a call to the assistant turn just before it, or opens one.
fn push_call(messages: &mut Vec<Value>, call: Value) {
    let last_is_assistant = messages
        .last()
        .is_some_and(|last| last["role"] == "assistant");
    if !last_is_assistant {
        messages.push(json!({"role": "assistant", "content": ""}));
    }
    if let Some(Value::Object(turn)) = messages.last_mut() {
        let calls = turn
            .entry("tool_calls")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(calls) = calls {
            calls.push(call);
        }
    }
}
