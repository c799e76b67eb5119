//! Relaying a generation as server-sent events, in the order OpenAI clients expect: the
//! endpoint's opening chunks, one chunk per delta, a chunk with the finish reason, a usage chunk
//! if asked for, then `data: [DONE]`. A generation that fails mid-stream ends with one
//! `data: {"error": {...}}` event instead, since the HTTP status was already sent.
//!
//! The event stream owns the [`GenerationStream`]: when the client disconnects, axum drops the
//! body, and with it the stream's cancel guard, which cancels the sequence on the worker.

use std::collections::VecDeque;

use axum::response::sse::{Event, Sse};
use corral_ipc::{FinishReason, TokenLogprob, ToolCall, Usage};
use futures_util::stream::{self, Stream};

use super::backend::{BackendError, GenerationStream, StreamEvent};
use super::error::ApiError;
use super::generation::ended_early;

/// What one worker delta adds to the answer.
pub struct Generated {
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub logprobs: Option<Vec<TokenLogprob>>,
}

/// How one endpoint shapes its chunks.
pub trait ChunkFormat: Send + 'static {
    /// Chunks sent before the first delta.
    fn opening(&mut self) -> Vec<Result<Event, axum::Error>>;
    /// The chunks for one delta (a tool call takes two).
    fn delta(&mut self, delta: Generated) -> Vec<Result<Event, axum::Error>>;
    fn finish(&mut self, reason: FinishReason) -> Result<Event, axum::Error>;
    fn usage(&mut self, usage: Usage) -> Result<Event, axum::Error>;
}

struct Relay<F> {
    events: GenerationStream,
    format: F,
    include_usage: bool,
    pending: VecDeque<Result<Event, axum::Error>>,
    finished: bool,
}

pub fn response<F: ChunkFormat>(
    events: GenerationStream,
    mut format: F,
    include_usage: bool,
) -> Sse<impl Stream<Item = Result<Event, axum::Error>> + Send + 'static> {
    let pending = format.opening().into();
    let relay = Relay {
        events,
        format,
        include_usage,
        pending,
        finished: false,
    };
    Sse::new(stream::unfold(relay, |mut relay| async move {
        let event = relay.next_event().await?;
        Some((event, relay))
    }))
}

impl<F: ChunkFormat> Relay<F> {
    async fn next_event(&mut self) -> Option<Result<Event, axum::Error>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.finished {
                return None;
            }
            let event = self.events.next().await;
            self.handle(event);
        }
    }

    fn handle(&mut self, event: Option<StreamEvent>) {
        match event {
            Some(StreamEvent::Delta {
                text,
                reasoning,
                tool_calls,
                logprobs,
                ..
            }) => {
                // Text can lag tokens at UTF-8, stop-string or tool-call boundaries; an empty
                // delta with nothing else to report would only be noise.
                let empty = text.is_empty() && reasoning.is_empty() && tool_calls.is_empty();
                if !empty || logprobs.is_some() {
                    let delta = Generated {
                        text,
                        reasoning,
                        tool_calls,
                        logprobs,
                    };
                    self.pending.extend(self.format.delta(delta));
                }
            }
            Some(StreamEvent::Done {
                finish_reason,
                usage,
                ..
            }) => {
                let finish = self.format.finish(finish_reason);
                self.pending.push_back(finish);
                if self.include_usage {
                    let usage = self.format.usage(usage);
                    self.pending.push_back(usage);
                }
                self.pending.push_back(Ok(Event::default().data("[DONE]")));
                self.finished = true;
            }
            Some(StreamEvent::Failed { message }) => {
                self.fail(BackendError::WorkerFailed { message });
            }
            None => self.fail(ended_early()),
        }
    }

    fn fail(&mut self, error: BackendError) {
        let error = ApiError::from(error);
        tracing::warn!(%error, "generation failed mid-stream");
        self.pending
            .push_back(Event::default().json_data(error.body()));
        self.finished = true;
    }
}
