//! Checking chat messages and bringing them into the shape Hugging Face chat templates expect,
//! before they go to the worker as JSON values.
//!
//! Messages otherwise pass through as the client sent them (templates read model-specific fields),
//! with these normalisations: content given as an array of text parts becomes one string, since
//! most templates only handle strings; content with `image_url` parts stays an array, of `text`
//! parts and the `{"type": "image"}` placeholders templates render, the images themselves going
//! apart (`images`); and tool-call `arguments`, a JSON *string* in the OpenAI API, become
//! objects, since templates render them with `tojson`.

use serde_json::{Map, Value, json};

use super::error::ApiError;
use super::images::{Pending, placeholder};

/// Checked messages, and their images in order: `images[n]` is the n-th placeholder.
#[derive(Debug)]
pub struct Normalized {
    pub messages: Vec<Value>,
    pub images: Vec<Pending>,
}

const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

pub fn normalize(messages: Vec<Value>) -> Result<Normalized, ApiError> {
    if messages.is_empty() {
        return Err(invalid("messages must contain at least one message"));
    }
    let mut images = Vec::new();
    let messages = messages
        .into_iter()
        .enumerate()
        .map(|(index, message)| normalize_message(index, message, &mut images))
        .collect::<Result<_, _>>()?;
    Ok(Normalized { messages, images })
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::invalid(message, "messages")
}

fn normalize_message(
    index: usize,
    message: Value,
    images: &mut Vec<Pending>,
) -> Result<Value, ApiError> {
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
        Some(content) => normalize_content(index, content, images)?,
        None if calls_tools => {}
        None => return Err(invalid(format!("messages[{index}] has no content"))),
    }
    if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
        calls.iter_mut().for_each(parse_arguments);
    }
    Ok(Value::Object(message))
}

fn normalize_content(
    index: usize,
    content: &mut Value,
    images: &mut Vec<Pending>,
) -> Result<(), ApiError> {
    let parts = match content {
        Value::String(_) | Value::Null => return Ok(()),
        Value::Array(parts) => parts,
        _ => {
            return Err(invalid(format!(
                "messages[{index}].content must be a string or an array of text and image_url \
                 parts"
            )));
        }
    };
    let mut texts = Vec::with_capacity(parts.len());
    let mut with_images = Vec::with_capacity(parts.len());
    for (part_index, part) in parts.iter().enumerate() {
        let location = format!("messages[{index}].content[{part_index}]");
        match part_of(part, &location)? {
            Part::Text(text) => {
                texts.push(text);
                with_images.push(json!({"type": "text", "text": text}));
            }
            Part::Image(image) => {
                images.push(image);
                with_images.push(placeholder());
            }
        }
    }
    *content = if texts.len() == with_images.len() {
        Value::String(texts.join("\n"))
    } else {
        Value::Array(with_images)
    };
    Ok(())
}

enum Part<'a> {
    Text(&'a str),
    Image(Pending),
}

fn part_of<'a>(part: &'a Value, location: &str) -> Result<Part<'a>, ApiError> {
    let field = |name: &str| part.get(name).and_then(Value::as_str);
    match (field("type"), field("text")) {
        (Some("text"), Some(text)) => Ok(Part::Text(text)),
        (Some("image_url"), _) => {
            // `{"url": ..., "detail": ...}`, or the bare string some clients send.
            let url = match part.get("image_url") {
                Some(Value::String(url)) => Some(url.as_str()),
                Some(image_url) => image_url.get("url").and_then(Value::as_str),
                None => None,
            }
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("{location}: an image_url part needs image_url.url, a string"),
                    location.to_owned(),
                )
            })?;
            Ok(Part::Image(Pending::from_url(url, location.to_owned())?))
        }
        (Some(kind), _) if kind != "text" => Err(ApiError::invalid(
            format!("{location}: `{kind}` parts are not supported, only `text` and `image_url`"),
            location.to_owned(),
        )),
        _ => Err(ApiError::invalid(
            format!(
                "{location}: a part must look like {{\"type\": \"text\", \"text\": \"...\"}} \
                 or {{\"type\": \"image_url\", \"image_url\": {{\"url\": \"...\"}}}}"
            ),
            location.to_owned(),
        )),
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
