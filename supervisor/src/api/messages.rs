//! Checking chat messages and bringing them into the shape Hugging Face chat templates expect,
//! before they go to the worker as JSON values.
//!
//! Messages otherwise pass through as the client sent them (templates read model-specific fields),
//! with two normalisations: content given as an array of text parts becomes one string, since
//! most templates only handle strings; and tool-call `arguments`, a JSON *string* in the OpenAI
//! API, become objects, since templates render them with `tojson`.

use serde_json::{Map, Value};

use super::error::ApiError;

const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

pub fn normalize(messages: Vec<Value>) -> Result<Vec<Value>, ApiError> {
    if messages.is_empty() {
        return Err(invalid("messages must contain at least one message"));
    }
    messages
        .into_iter()
        .enumerate()
        .map(|(index, message)| normalize_message(index, message))
        .collect()
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::invalid(message, "messages")
}

fn normalize_message(index: usize, message: Value) -> Result<Value, ApiError> {
    let Value::Object(mut message) = message else {
        return Err(invalid(format!("messages[{index}] must be an object")));
    };
    let role = match message.get("role") {
        Some(Value::String(role)) if ROLES.contains(&role.as_str()) => role.clone(),
        Some(Value::String(role)) => {
            return Err(invalid(format!(
                "messages[{index}].role `{role}` is not one of {}",
                ROLES.join(", ")
            )));
        }
        Some(_) => return Err(invalid(format!("messages[{index}].role must be a string"))),
        None => return Err(invalid(format!("messages[{index}] has no role"))),
    };
    // An assistant turn that only calls tools has no content.
    let calls_tools = role == "assistant" && message.contains_key("tool_calls");
    match message.get_mut("content") {
        Some(content) => normalize_content(index, content)?,
        None if calls_tools => {}
        None => return Err(invalid(format!("messages[{index}] has no content"))),
    }
    if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
        calls.iter_mut().for_each(parse_arguments);
    }
    Ok(Value::Object(message))
}

fn normalize_content(index: usize, content: &mut Value) -> Result<(), ApiError> {
    let parts = match content {
        Value::String(_) | Value::Null => return Ok(()),
        Value::Array(parts) => parts,
        _ => {
            return Err(invalid(format!(
                "messages[{index}].content must be a string or an array of text parts"
            )));
        }
    };
    let mut texts = Vec::with_capacity(parts.len());
    for part in parts.iter() {
        texts.push(text_part(index, part)?);
    }
    *content = Value::String(texts.join("\n"));
    Ok(())
}

fn text_part(index: usize, part: &Value) -> Result<&str, ApiError> {
    let field = |name: &str| part.get(name).and_then(Value::as_str);
    match (field("type"), field("text")) {
        (Some("text"), Some(text)) => Ok(text),
        (Some(kind), _) if kind != "text" => Err(invalid(format!(
            "messages[{index}].content: `{kind}` parts are not supported, only `text`"
        ))),
        _ => Err(invalid(format!(
            "messages[{index}].content parts must look like {{\"type\": \"text\", \"text\": \"...\"}}"
        ))),
    }
}

/// Replaces a tool call's `function.arguments` string with the JSON it holds. Arguments that are
/// not valid JSON (a model can produce those, and clients echo them back) stay a string.
fn parse_arguments(call: &mut Value) {
    let Some(function) = call.get_mut("function").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(parsed) = parsed_arguments(function) {
        function.insert("arguments".to_owned(), parsed);
    }
}

fn parsed_arguments(function: &Map<String, Value>) -> Option<Value> {
    let text = function.get("arguments")?.as_str()?;
    serde_json::from_str(text).ok()
}
