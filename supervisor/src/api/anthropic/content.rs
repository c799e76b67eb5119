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
//! - An assistant turn's `thinking` becomes `reasoning_content`, its `tool_use` blocks
//!   `tool_calls` with the input as an object (templates render arguments with `tojson`).
//! - `cache_control` is ignored: the prefix cache needs no hints. Images and documents are
//!   refused until vision exists.

use serde_json::{Map, Value, json};

use super::error::AnthropicError;

pub fn messages(
    system: Option<&Value>,
    messages: Vec<Value>,
) -> Result<Vec<Value>, AnthropicError> {
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
            Some("user") => user(content, &at, &mut translated)?,
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
    Ok(translated)
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
    Thinking(&'a str),
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Option<&'a Value>,
    },
    ToolResult {
        id: &'a str,
        content: String,
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
            Some(kind @ ("image" | "document")) => Err(AnthropicError::invalid(format!(
                "{at}: `{kind}` blocks are not supported: this server has no vision models yet"
            ))),
            Some(kind) => Err(AnthropicError::invalid(format!(
                "{at}: `{kind}` blocks are not supported; use text, tool_use, tool_result or \
                 thinking"
            ))),
            None => Err(AnthropicError::invalid(format!(
                "{at}.type: field required"
            ))),
        }
    }
}

/// A tool result's content as text; an error result says so, since the template has no flag.
fn tool_result(block: &Value, at: &str) -> Result<String, AnthropicError> {
    let text = match block.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(content) => text_of(content, &format!("{at}.content"))?,
    };
    if block.get("is_error").and_then(Value::as_bool) == Some(true) {
        return Ok(format!("Error: {text}"));
    }
    Ok(text)
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

fn user(content: &Value, at: &str, translated: &mut Vec<Value>) -> Result<(), AnthropicError> {
    let mut texts = Vec::new();
    for block in blocks(content, at)? {
        match block {
            Block::Text(text) => texts.push(text),
            Block::ToolResult { id, content } => {
                translated.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            Block::Thinking(_) | Block::ToolUse { .. } => {
                return Err(AnthropicError::invalid(format!(
                    "{at}: a user message holds text and tool_result blocks only"
                )));
            }
        }
    }
    // A turn of only tool results has no text of its own.
    if !texts.is_empty() || matches!(content, Value::String(_)) {
        translated.push(json!({"role": "user", "content": texts.join("\n")}));
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
            Block::ToolResult { .. } => {
                return Err(AnthropicError::invalid(format!(
                    "{at}: tool_result blocks belong in a user message"
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
