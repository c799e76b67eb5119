//! The OpenAI shapes of a chat answer: one `chat.completion` object, or a stream of
//! `chat.completion.chunk` objects whose first delta carries the assistant role.

use axum::response::sse::Event;
use corral_ipc::{FinishReason, Usage};
use serde::Serialize;

use super::generation::Collected;
use super::logprobs::{self, ChatLogprobs};
use super::sse::{ChunkFormat, Generated};
use super::tools::{MessageToolCall, ToolCallDelta, call_deltas};
use super::types::{UsageBody, finish_reason, response_id, unix_now};

#[derive(Debug, Serialize)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: UsageBody,
}

#[derive(Debug, Serialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: &'static str,
}

/// `content` is null when the model only called tools, as OpenAI answers.
#[derive(Debug, Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    pub content: Option<String>,
    /// The thinking of a reasoning model, under the name vLLM and DeepSeek's API give it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<MessageToolCall>,
}

impl ChatCompletion {
    pub fn new(model: String, collected: Collected) -> Self {
        ChatCompletion {
            id: response_id("chatcmpl"),
            object: "chat.completion",
            created: unix_now(),
            model,
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant",
                    content: (!collected.text.is_empty() || collected.tool_calls.is_empty())
                        .then_some(collected.text),
                    reasoning_content: (!collected.reasoning.is_empty())
                        .then_some(collected.reasoning),
                    tool_calls: collected
                        .tool_calls
                        .into_iter()
                        .map(MessageToolCall::new)
                        .collect(),
                },
                logprobs: collected.logprobs.as_deref().map(logprobs::chat),
                finish_reason: finish_reason(collected.finish_reason),
            }],
            usage: collected.usage.into(),
        }
    }
}

#[derive(Debug, Serialize)]
struct ChatChunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageBody>,
}

#[derive(Debug, Serialize)]
struct ChunkChoice {
    index: u32,
    delta: ChunkDelta,
    logprobs: Option<ChatLogprobs>,
    finish_reason: Option<&'static str>,
}

#[derive(Debug, Default, Serialize)]
struct ChunkDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

/// Shapes a streamed chat answer; every chunk shares one id, timestamp and model.
pub struct ChatChunks {
    id: String,
    created: u64,
    model: String,
}

impl ChatChunks {
    pub fn new(model: String) -> Self {
        ChatChunks {
            id: response_id("chatcmpl"),
            created: unix_now(),
            model,
        }
    }

    fn event(
        &self,
        choices: Vec<ChunkChoice>,
        usage: Option<UsageBody>,
    ) -> Result<Event, axum::Error> {
        Event::default().json_data(ChatChunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            choices,
            usage,
        })
    }

    fn choice(
        delta: ChunkDelta,
        logprobs: Option<ChatLogprobs>,
        finish_reason: Option<&'static str>,
    ) -> Vec<ChunkChoice> {
        vec![ChunkChoice {
            index: 0,
            delta,
            logprobs,
            finish_reason,
        }]
    }
}

impl ChunkFormat for ChatChunks {
    fn opening(&mut self) -> Vec<Result<Event, axum::Error>> {
        let delta = ChunkDelta {
            role: Some("assistant"),
            content: Some(String::new()),
            ..ChunkDelta::default()
        };
        vec![self.event(Self::choice(delta, None, None), None)]
    }

    /// Reasoning, then text, then each tool call as its two deltas; the logprobs ride on the
    /// first chunk.
    fn delta(&mut self, delta: Generated) -> Vec<Result<Event, axum::Error>> {
        let mut deltas = Vec::new();
        if !delta.reasoning.is_empty() {
            deltas.push(ChunkDelta {
                reasoning_content: Some(delta.reasoning),
                ..ChunkDelta::default()
            });
        }
        if !delta.text.is_empty() || (deltas.is_empty() && delta.tool_calls.is_empty()) {
            deltas.push(ChunkDelta {
                content: Some(delta.text),
                ..ChunkDelta::default()
            });
        }
        for call in delta.tool_calls {
            deltas.extend(call_deltas(call).map(|call| ChunkDelta {
                tool_calls: Some(vec![call]),
                ..ChunkDelta::default()
            }));
        }
        let mut logprobs = delta.logprobs.as_deref().map(logprobs::chat);
        deltas
            .into_iter()
            .map(|delta| self.event(Self::choice(delta, logprobs.take(), None), None))
            .collect()
    }

    fn finish(&mut self, reason: FinishReason) -> Result<Event, axum::Error> {
        let choices = Self::choice(ChunkDelta::default(), None, Some(finish_reason(reason)));
        self.event(choices, None)
    }

    fn usage(&mut self, usage: Usage) -> Result<Event, axum::Error> {
        self.event(Vec::new(), Some(usage.into()))
    }
}
