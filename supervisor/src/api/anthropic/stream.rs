//! A streamed answer as Anthropic's events: `message_start` (with the prompt's usage), `ping`,
//! then per content block `content_block_start`, its deltas (`thinking_delta`, `text_delta`,
//! `input_json_delta`) and `content_block_stop`, then `message_delta` (stop reason and output
//! usage) and `message_stop`. A generation that fails after the status was sent ends with one
//! `error` event instead.
//!
//! A `ping` also goes out after every [`PING_INTERVAL`] without an event, so a long prefill (or a
//! model slow to think) does not look like a dead connection to the client or a proxy.
//!
//! The relay owns the [`GenerationStream`]: a client that leaves drops it, and its cancel guard
//! ends the sequence on the worker.

use std::collections::VecDeque;
use std::time::Duration;

use axum::response::sse::{Event, Sse};
use corral_ipc::{FinishReason, ToolCall, Usage};
use futures_util::stream::Stream;
use serde::Serialize;
use serde_json::{Value, json};

use super::error::{AnthropicError, ErrorBody};
use super::response::{Block, UsageBody, message_id, stop_reason, tool_use_id};
use crate::api::backend::{BackendError, GenerationStream, StreamEvent};
use crate::api::generation::ended_early;
use crate::api::sse::{Relay, SseEvent, relay};

pub const PING_INTERVAL: Duration = Duration::from_secs(10);

/// The block being streamed. A tool call arrives whole, so its block closes right after its
/// one delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
    ToolUse,
}

/// The answer being streamed.
struct Answer {
    pending: VecDeque<SseEvent>,
    open: Option<Open>,
    next_index: u32,
    finished: bool,
}

pub fn response(
    events: GenerationStream,
    model: String,
) -> Sse<impl Stream<Item = SseEvent> + Send + 'static> {
    // The worker restored its prefix before accepting, so the prompt's split is final here;
    // `message_delta` repeats it with the output count.
    let usage = UsageBody::from(Usage {
        prompt_tokens: events.prompt_tokens,
        completion_tokens: 0,
        cached_tokens: events.cached_tokens,
        ..Usage::default()
    });
    let message = json!({
        "id": message_id(), "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage,
    });
    let answer = Answer {
        pending: VecDeque::from([
            event(
                "message_start",
                json!({"type": "message_start", "message": message}),
            ),
            ping(),
        ]),
        open: None,
        next_index: 0,
        finished: false,
    };
    relay(events, answer)
}

fn event(name: &str, data: impl Serialize) -> SseEvent {
    Event::default().event(name).json_data(data)
}

fn ping() -> SseEvent {
    event("ping", json!({"type": "ping"}))
}

impl Relay for Answer {
    fn ready(&mut self) -> Option<SseEvent> {
        self.pending.pop_front()
    }

    fn finished(&self) -> bool {
        self.finished
    }

    fn keep_alive(&self) -> Option<(Duration, fn() -> SseEvent)> {
        Some((PING_INTERVAL, ping))
    }

    fn handle(&mut self, event: Option<StreamEvent>) {
        match event {
            Some(StreamEvent::Delta {
                text,
                reasoning,
                tool_calls,
                ..
            }) => {
                self.stream_into(Open::Thinking, reasoning);
                self.stream_into(Open::Text, text);
                tool_calls.into_iter().for_each(|call| self.tool_use(call));
            }
            Some(StreamEvent::Done {
                finish_reason,
                stop_sequence,
                usage,
            }) => self.finish(finish_reason, stop_sequence, usage),
            Some(StreamEvent::Failed { message }) => {
                self.fail(BackendError::WorkerFailed { message });
            }
            None => self.fail(ended_early()),
        }
    }
}

impl Answer {
    /// Appends `piece` to the open block of `kind`, opening one (and closing another) first.
    fn stream_into(&mut self, kind: Open, piece: String) {
        if piece.is_empty() {
            return;
        }
        let (block, delta) = match kind {
            Open::Thinking => (
                Block::thinking(String::new()),
                json!({"type": "thinking_delta", "thinking": piece}),
            ),
            _ => (
                Block::Text {
                    text: String::new(),
                },
                json!({"type": "text_delta", "text": piece}),
            ),
        };
        if self.open != Some(kind) {
            self.start_block(kind, block);
        }
        self.delta(delta);
    }

    /// A whole call: its block opens with an empty input, which one `input_json_delta` fills.
    fn tool_use(&mut self, call: ToolCall) {
        let block = Block::ToolUse {
            id: tool_use_id(),
            name: call.name,
            input: Value::Object(Default::default()),
        };
        self.start_block(Open::ToolUse, block);
        self.delta(json!({"type": "input_json_delta", "partial_json": call.arguments}));
        self.close_block();
    }

    fn start_block(&mut self, kind: Open, block: Block) {
        self.close_block();
        self.open = Some(kind);
        let data = json!({
            "type": "content_block_start", "index": self.next_index, "content_block": block,
        });
        self.pending.push_back(event("content_block_start", data));
    }

    fn delta(&mut self, delta: Value) {
        let data = json!({"type": "content_block_delta", "index": self.next_index, "delta": delta});
        self.pending.push_back(event("content_block_delta", data));
    }

    fn close_block(&mut self) {
        if self.open.take().is_some() {
            let data = json!({"type": "content_block_stop", "index": self.next_index});
            self.pending.push_back(event("content_block_stop", data));
            self.next_index += 1;
        }
    }

    fn finish(&mut self, reason: FinishReason, stop_sequence: Option<String>, usage: Usage) {
        self.close_block();
        let usage = UsageBody::from(usage);
        let stop_reason = stop_reason(reason, stop_sequence.as_deref());
        let data = json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": usage,
        });
        self.pending.push_back(event("message_delta", data));
        self.pending
            .push_back(event("message_stop", json!({"type": "message_stop"})));
        self.finished = true;
    }

    fn fail(&mut self, error: BackendError) {
        let error = AnthropicError::from(error);
        tracing::warn!(error = %error.0, "generation failed mid-stream");
        let body: ErrorBody = error.body();
        self.pending.push_back(event("error", body));
        self.finished = true;
    }
}
