//! A Responses `input` turned into the chat messages the worker's templates render: a string is
//! one user message; items are messages (`input_text`/`output_text` parts joined into one
//! string; with `input_image` parts, an array of `text` and chat `image_url` parts, which
//! `messages::normalize` then takes apart like a chat request's), `function_call` and
//! `custom_tool_call` items (merged into the assistant turn before
//! them, as chat keeps a turn's calls together; a namespaced call under its flat name, a custom
//! call with its text as the `input` argument, as `tools.rs` offers them) and their outputs
//! (`tool` messages, whose output may hold images too). `additional_tools` items carry tools, which `tools.rs` reads. Items that
//! record what hosted tools or the provider did (`reasoning`, `web_search_call`, `compaction`...)
//! are accepted and left out: chat templates drop past thinking, and corral ran none of them.
//!
//! Arguments stay JSON strings here, as chat clients send them; `messages::normalize` parses
//! them for the templates later, so the stored conversation keeps the client's text.

use serde::Deserialize;
use serde_json::{Value, json};

use super::tools::{custom_arguments, flat_name};
use crate::api::error::ApiError;
use crate::api::images::Pending;

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

/// The input as chat messages, and where each of its images is in the input, in order.
#[derive(Debug, Default)]
pub struct Translated {
    pub messages: Vec<Value>,
    pub image_locations: Vec<String>,
}

pub fn messages(input: Input) -> Result<Translated, ApiError> {
    let items = match input {
        Input::Text(text) => {
            return Ok(Translated {
                messages: vec![json!({"role": "user", "content": text})],
                image_locations: Vec::new(),
            });
        }
        Input::Items(items) => items,
    };
    let mut messages: Vec<Value> = Vec::with_capacity(items.len());
    let mut images = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let field = |name: &str| item.get(name).and_then(Value::as_str);
        match field("type").unwrap_or("message") {
            "message" => messages.push(message(index, item, &mut images)?),
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
                "content": content(index, item.get("output"), "output", &mut images)?,
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
    Ok(Translated {
        messages,
        image_locations: images,
    })
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

fn message(index: usize, item: &Value, images: &mut Vec<String>) -> Result<Value, ApiError> {
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
    let content = content(index, item.get("content"), "content", images)?;
    Ok(json!({"role": role, "content": content}))
}

/// Content as a string: text parts (`input_text`, `output_text`) joined by newlines; or, with
/// `input_image` parts, an array of chat `text` and `image_url` parts in order. Files are
/// refused, as no model here reads them.
fn content(
    index: usize,
    content: Option<&Value>,
    field: &str,
    images: &mut Vec<String>,
) -> Result<Value, ApiError> {
    let parts = match content {
        Some(Value::String(text)) => return Ok(text.as_str().into()),
        Some(Value::Array(parts)) => parts,
        _ => {
            return Err(invalid(
                index,
                format!(
                    "input[{index}].{field} must be a string or an array of text and image parts"
                ),
                field,
            ));
        }
    };
    let mut texts = Vec::with_capacity(parts.len());
    let mut chat_parts = Vec::with_capacity(parts.len());
    for (part_index, part) in parts.iter().enumerate() {
        let location = format!("input[{index}].{field}[{part_index}]");
        let kind = part.get("type").and_then(Value::as_str);
        match (kind, part.get("text").and_then(Value::as_str)) {
            (Some("input_text" | "output_text" | "text"), Some(text)) => {
                texts.push(text);
                chat_parts.push(json!({"type": "text", "text": text}));
            }
            (Some("input_image"), _) => {
                let url = image_url(part, &location)?;
                chat_parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                images.push(location);
            }
            _ => {
                return Err(ApiError::invalid(
                    format!(
                        "{location}: only input_text, output_text and input_image parts are \
                         supported, got {}",
                        kind.unwrap_or("a part without a type")
                    ),
                    location,
                ));
            }
        }
    }
    if texts.len() == chat_parts.len() {
        return Ok(texts.join("\n").into());
    }
    Ok(chat_parts.into())
}

/// An `input_image`'s `image_url` (a data URL or an `http(s)` URL), checked here so that a
/// malformed one is named by its place in `input`.
fn image_url<'a>(part: &'a Value, location: &str) -> Result<&'a str, ApiError> {
    let url = match part.get("image_url") {
        Some(Value::String(url)) => Some(url.as_str()),
        Some(image_url) => image_url.get("url").and_then(Value::as_str),
        None => None,
    };
    match (url, part.get("file_id")) {
        (Some(url), _) => {
            Pending::from_url(url, location.to_owned())?;
            Ok(url)
        }
        (None, Some(_)) => Err(ApiError::invalid(
            format!(
                "{location}: images by file_id are not supported (this server has no Files API); \
                 send image_url, a data: URL or an http(s) URL"
            ),
            location.to_owned(),
        )),
        (None, None) => Err(ApiError::invalid(
            format!("{location}: an input_image needs image_url, a data: URL or an http(s) URL"),
            location.to_owned(),
        )),
    }
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
