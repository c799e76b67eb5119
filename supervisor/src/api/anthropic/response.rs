//! The Anthropic shape of an answer: a `message` with `content` blocks (`thinking`, `text`,
//! `tool_use`), its `stop_reason` and `usage`. The streamed events (`stream.rs`) build the same
//! message piece by piece.

use corral_ipc::{FinishReason, ToolCall, Usage};
use serde::Serialize;
use serde_json::Value;

use crate::api::generation::Collected;
use crate::api::types::response_id;

#[derive(Debug, Serialize)]
pub struct Message {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    pub model: String,
    pub content: Vec<Block>,
    pub stop_reason: Option<&'static str>,
    pub stop_sequence: Option<String>,
    pub usage: UsageBody,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// The signature is Anthropic's proof that it wrote the thinking; a local model has none.
    Thinking {
        thinking: String,
        signature: String,
    },
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

impl Block {
    pub fn thinking(thinking: String) -> Self {
        Block::Thinking {
            thinking,
            signature: String::new(),
        }
    }

    /// A whole call from the worker, with a fresh `toolu_…` id and its arguments parsed.
    pub fn tool_use(call: ToolCall) -> Self {
        // The worker sends only calls it parsed, so their arguments are JSON; should one not
        // be, the client still gets a block of the right shape.
        let input = serde_json::from_str(&call.arguments).unwrap_or_else(|error| {
            tracing::warn!(%error, "a tool call's arguments are not JSON");
            Value::Object(Default::default())
        });
        Block::ToolUse {
            id: tool_use_id(),
            name: call.name,
            input,
        }
    }
}

/// A fresh `toolu_…` id; ids only need to be unique within the conversation.
pub fn tool_use_id() -> String {
    response_id("toolu").replacen('-', "_", 1)
}

/// Anthropic splits the prompt: `input_tokens` were processed, `cache_read_input_tokens` came
/// from the prefix cache; their sum is what `count_tokens` reports.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct UsageBody {
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub cache_read_input_tokens: u32,
    pub cache_creation_input_tokens: u32,
}

impl From<Usage> for UsageBody {
    fn from(usage: Usage) -> Self {
        UsageBody {
            input_tokens: usage.prompt_tokens.saturating_sub(usage.cached_tokens),
            output_tokens: usage.completion_tokens,
            cache_read_input_tokens: usage.cached_tokens,
            cache_creation_input_tokens: 0,
        }
    }
}

/// A cancelled answer only reaches a client that left, so it reads as a normal end.
pub fn stop_reason(reason: FinishReason, stop_sequence: Option<&str>) -> &'static str {
    match reason {
        FinishReason::Stop if stop_sequence.is_some() => "stop_sequence",
        FinishReason::Stop | FinishReason::Cancelled => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
    }
}

pub fn message_id() -> String {
    response_id("msg").replacen('-', "_", 1)
}

impl Message {
    /// `model` is the name the client asked for, echoed as Anthropic does: a client that sent
    /// `claude-sonnet-…` through an alias gets back the name it knows.
    pub fn new(model: String, collected: Collected) -> Self {
        let mut content = Vec::new();
        if !collected.reasoning.is_empty() {
            content.push(Block::thinking(collected.reasoning));
        }
        if !collected.text.is_empty() {
            content.push(Block::Text {
                text: collected.text,
            });
        }
        content.extend(collected.tool_calls.into_iter().map(Block::tool_use));
        Message {
            id: message_id(),
            kind: "message",
            role: "assistant",
            model,
            content,
            stop_reason: Some(stop_reason(
                collected.finish_reason,
                collected.stop_sequence.as_deref(),
            )),
            stop_sequence: collected.stop_sequence,
            usage: collected.usage.into(),
        }
    }
}
