//! Anthropic's conversation (`system` and `messages` with content blocks) as the OpenAI-shaped
//! messages the worker's chat templates render.
//!
//! - `system`, a string or text blocks, and the `system` role messages that open `messages`
//!   become one leading system message, in order. A `system` message after a turn (Claude Code
//!   sends those) stays in place: moving it to the start would change the start of every later
//!   prompt and lose the prefix cache's reuse. A template that refuses it there gets it from the
//!   worker as a marked user turn.
//! - A user turn's `tool_result` blocks become `role: tool` messages, placed before the turn's
//!   text, since templates expect results right after the assistant's calls.
//! - `image` blocks (a `base64` or `url` source), in a user turn or in a tool result (Claude Code
//!   returns screenshots and the images it reads that way), become `{"type": "image"}` parts of
//!   the message's content, which is then an array of `text` and `image` parts; the images go
//!   apart, in message order (`api::images`).
//! - An assistant turn's `thinking` becomes `reasoning_content`, its `tool_use` blocks
//!   `tool_calls` with the input as an object (templates render arguments with `tojson`).
//! - `cache_control` is ignored: the prefix cache needs no hints. Documents are refused.

use serde_json::{Map, Value, json};

use super::error::AnthropicError;
use crate::api::images::{Pending, placeholder};

/// The translated messages, and their images in order: `images[n]` is the n-th placeholder.
#[derive(Debug)]
pub struct Conversation {
    pub messages: Vec<Value>,
    pub images: Vec<Pending>,
}

pub fn messages(
    system: Option<&Value>,
    messages: Vec<Value>,
) -> Result<Conversation, AnthropicError> {
    if messages.is_empty() {
        return Err(AnthropicError::invalid(
            "messages: at least one message is required",
        ));
    }
    let mut system_text = match system {
        None | Some(Value::Null) => Vec::new(),
        Some(system) => vec![text_of(system, "system")?],
    };
    let mut translated = Vec::with_capacity(messages.len() + 1);
    let mut images = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let at = format!("messages[{index}]");
        let content = message
            .get("content")
            .ok_or_else(|| AnthropicError::invalid(format!("{at}.content: field required")))?;
        match message.get("role").and_then(Value::as_str) {
            Some("system") if translated.is_empty() => system_text.push(text_of(content, &at)?),
            Some("system") => {
                translated.push(json!({"role": "system", "content": text_of(content, &at)?}))
            }
            Some("user") => user(content, &at, &mut translated, &mut images)?,
            Some("assistant") => translated.push(assistant(content, &at)?),
            _ => {
                return Err(AnthropicError::invalid(format!(
                    "{at}.role: must be one of user, assistant, system"
                )));
            }
        }
    }
    let system_text: Vec<String> = system_text.into_iter().filter(|t| !t.is_empty()).collect();
    if !system_text.is_empty() {
        translated.insert(
            0,
            json!({"role": "system", "content": system_text.join("\n\n")}),
        );
    }
    Ok(Conversation {
        messages: translated,
        images,
    })
}

/// The blocks of a content array, or one text block for a string.
fn blocks<'a>(content: &'a Value, at: &str) -> Result<Vec<Block<'a>>, AnthropicError> {
    match content {
        Value::String(text) => Ok(vec![Block::Text(text)]),
        Value::Array(blocks) => blocks
            .iter()
            .enumerate()
            .map(|(index, block)| Block::parse(block, &format!("{at}.content[{index}]")))
            .collect(),
        _ => Err(AnthropicError::invalid(format!(
            "{at}.content: must be a string or an array of content blocks"
        ))),
    }
}

enum Block<'a> {
    Text(&'a str),
    Image(Pending),
    Thinking(&'a str),
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Option<&'a Value>,
    },
    ToolResult {
        id: &'a str,
        content: Parts,
    },
}

impl<'a> Block<'a> {
    fn parse(block: &'a Value, at: &str) -> Result<Self, AnthropicError> {
        let field = |name: &str| {
            block
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| AnthropicError::invalid(format!("{at}.{name}: must be a string")))
        };
        match block.get("type").and_then(Value::as_str) {
            Some("text") => Ok(Block::Text(field("text")?)),
            Some("thinking") => Ok(Block::Thinking(field("thinking")?)),
            // Its content is encrypted: nothing a local model can read.
            Some("redacted_thinking") => Ok(Block::Thinking("")),
            Some("tool_use") => Ok(Block::ToolUse {
                id: field("id")?,
                name: field("name")?,
                input: block.get("input"),
            }),
            Some("tool_result") => Ok(Block::ToolResult {
                id: field("tool_use_id")?,
                content: tool_result(block, at)?,
            }),
            Some("image") => Ok(Block::Image(image(block, at)?)),
            Some("document") => Err(AnthropicError::invalid(format!(
                "{at}: `document` blocks are not supported"
            ))),
            Some(kind) => Err(AnthropicError::invalid(format!(
                "{at}: `{kind}` blocks are not supported; use text, image, tool_use, tool_result \
                 or thinking"
            ))),
            None => Err(AnthropicError::invalid(format!(
                "{at}.type: field required"
            ))),
        }
    }
}

/// An image block's source: `base64` (`media_type`, `data`) or `url`.
fn image(block: &Value, at: &str) -> Result<Pending, AnthropicError> {
    let source = block
        .get("source")
        .ok_or_else(|| AnthropicError::invalid(format!("{at}.source: field required")))?;
    let field = |name: &str| {
        source
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| AnthropicError::invalid(format!("{at}.source.{name}: must be a string")))
    };
    let pending = match field("type")? {
        "base64" => Pending::from_base64(field("media_type")?, field("data")?, at.to_owned())?,
        "url" => Pending::from_url(field("url")?, at.to_owned())?,
        kind => {
            return Err(AnthropicError::invalid(format!(
                "{at}.source.type: `{kind}` is not supported; use base64 or url"
            )));
        }
    };
    Ok(pending)
}

/// Text, or text and images in order (then an array of `text` and `image` parts).
#[derive(Default)]
struct Parts {
    parts: Vec<Value>,
    images: Vec<Pending>,
}

impl Parts {
    fn text(&mut self, text: &str) {
        self.parts.push(json!({"type": "text", "text": text}));
    }

    fn image(&mut self, image: Pending) {
        self.parts.push(placeholder());
        self.images.push(image);
    }

    /// The texts joined by newlines where there are no images, as templates expect strings;
    /// otherwise the parts, the images going to `images`.
    fn into_content(self, images: &mut Vec<Pending>) -> Value {
        if self.images.is_empty() {
            let texts: Vec<&str> = self
                .parts
                .iter()
                .filter_map(|part| part["text"].as_str())
                .collect();
            return texts.join("\n").into();
        }
        images.extend(self.images);
        self.parts.into()
    }
}

/// A tool result's content (text and images); an error result says so, since the template has
/// no flag.
fn tool_result(block: &Value, at: &str) -> Result<Parts, AnthropicError> {
    let mut content = Parts::default();
    let blocks = match block.get("content") {
        None | Some(Value::Null) => Vec::new(),
        Some(value) => blocks(value, at)?,
    };
    for (index, block) in blocks.into_iter().enumerate() {
        match block {
            Block::Text(text) => content.text(text),
            Block::Image(image) => content.image(image),
            _ => {
                return Err(AnthropicError::invalid(format!(
                    "{at}.content[{index}]: only text and image blocks are allowed here"
                )));
            }
        }
    }
    if block.get("is_error").and_then(Value::as_bool) == Some(true) {
        match content.parts.first_mut() {
            Some(Value::Object(part))
                if part.get("type").and_then(Value::as_str) == Some("text") =>
            {
                let text = part.get("text").and_then(Value::as_str).unwrap_or_default();
                part.insert("text".into(), format!("Error: {text}").into());
            }
            _ => content
                .parts
                .insert(0, json!({"type": "text", "text": "Error: "})),
        }
    }
    Ok(content)
}

/// A string, or text blocks joined by newlines; any other block is refused.
fn text_of(content: &Value, at: &str) -> Result<String, AnthropicError> {
    let texts = blocks(content, at)?
        .into_iter()
        .enumerate()
        .map(|(index, block)| match block {
            Block::Text(text) => Ok(text),
            _ => Err(AnthropicError::invalid(format!(
                "{at}.content[{index}]: only text blocks are allowed here"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(texts.join("\n"))
}

fn user(
    content: &Value,
    at: &str,
    translated: &mut Vec<Value>,
    images: &mut Vec<Pending>,
) -> Result<(), AnthropicError> {
    let mut own = Parts::default();
    for block in blocks(content, at)? {
        match block {
            Block::Text(text) => own.text(text),
            Block::Image(image) => own.image(image),
            Block::ToolResult { id, content } => {
                let content = content.into_content(images);
                translated.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            Block::Thinking(_) | Block::ToolUse { .. } => {
                return Err(AnthropicError::invalid(format!(
                    "{at}: a user message holds text, image and tool_result blocks only"
                )));
            }
        }
    }
    // A turn of only tool results has no text of its own.
    if !own.parts.is_empty() || matches!(content, Value::String(_)) {
        let content = own.into_content(images);
        translated.push(json!({"role": "user", "content": content}));
    }
    Ok(())
}

fn assistant(content: &Value, at: &str) -> Result<Value, AnthropicError> {
    let (mut texts, mut thoughts, mut calls) = (Vec::new(), Vec::new(), Vec::new());
    for block in blocks(content, at)? {
        match block {
            Block::Text(text) => texts.push(text),
            Block::Thinking(thought) => thoughts.push(thought),
            Block::ToolUse { id, name, input } => calls.push(json!({
                "id": id,
                "type": "function",
                // A call without input took no arguments.
                "function": {"name": name, "arguments": input.cloned().unwrap_or(json!({}))},
            })),
            Block::ToolResult { .. } | Block::Image(_) => {
                return Err(AnthropicError::invalid(format!(
                    "{at}: tool_result and image blocks belong in a user message"
                )));
            }
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert("content".into(), texts.join("").into());
    let thoughts: String = thoughts.concat();
    if !thoughts.is_empty() {
        message.insert("reasoning_content".into(), thoughts.into());
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), calls.into());
    }
    Ok(Value::Object(message))
}
