//! Relaying a generation as server-sent events, in the order OpenAI clients expect: the
//! endpoint's opening chunks, one chunk per delta, a chunk with the finish reason, a usage chunk
//! if asked for, then `data: [DONE]`. A generation that fails mid-stream ends with one
//! `data: {"error": {...}}` event instead, since the HTTP status was already sent.
//!
//! [`relay`] drives every API's event stream (this one, Anthropic's, the Responses API's): it
//! owns the [`GenerationStream`], so when the client disconnects, axum drops the body, and with
//! it the stream's cancel guard, which cancels the sequence on the worker.

use std::collections::VecDeque;
use std::time::Duration;

use axum::response::sse::{Event, Sse};
use corral_ipc::{FinishReason, TokenLogprob, ToolCall, Usage};
use futures_util::stream::{self, Stream};

use super::backend::{BackendError, GenerationStream, StreamEvent};
use super::error::ApiError;
use super::generation::ended_early;

pub type SseEvent = Result<Event, axum::Error>;

/// How one API turns a generation's events into its server-sent events.
pub trait Relay: Send + 'static {
    /// Queues the SSE events for one generation event; `None` means the backend closed the
    /// stream without finishing it.
    fn handle(&mut self, event: Option<StreamEvent>);
    /// The next queued SSE event.
    fn ready(&mut self) -> Option<SseEvent>;
    /// Nothing more will be queued.
    fn finished(&self) -> bool;
    /// An event to send after this long without one (Anthropic's `ping`), so a long prefill
    /// does not look like a dead connection; `None` waits silently.
    fn keep_alive(&self) -> Option<(Duration, fn() -> SseEvent)> {
        None
    }
}

/// Sends what `relay` makes of `events`, in order, until it is finished.
pub fn relay<R: Relay>(
    events: GenerationStream,
    relay: R,
) -> Sse<impl Stream<Item = SseEvent> + Send + 'static> {
    Sse::new(stream::unfold(
        (events, relay),
        |(mut events, mut relay)| async move {
            let event = next_event(&mut events, &mut relay).await?;
            Some((event, (events, relay)))
        },
    ))
}

async fn next_event<R: Relay>(events: &mut GenerationStream, relay: &mut R) -> Option<SseEvent> {
    loop {
        if let Some(event) = relay.ready() {
            return Some(event);
        }
        if relay.finished() {
            return None;
        }
        let event = match relay.keep_alive() {
            Some((interval, keep_alive)) => {
                match tokio::time::timeout(interval, events.next()).await {
                    Ok(event) => event,
                    Err(_silence) => return Some(keep_alive()),
                }
            }
            None => events.next().await,
        };
        relay.handle(event);
    }
}

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

/// The OpenAI chunk stream of one endpoint.
struct Chunks<F> {
    format: F,
    include_usage: bool,
    pending: VecDeque<SseEvent>,
    finished: bool,
}

pub fn response<F: ChunkFormat>(
    events: GenerationStream,
    mut format: F,
    include_usage: bool,
) -> Sse<impl Stream<Item = SseEvent> + Send + 'static> {
    let pending = format.opening().into();
    let chunks = Chunks {
        format,
        include_usage,
        pending,
        finished: false,
    };
    relay(events, chunks)
}

impl<F: ChunkFormat> Relay for Chunks<F> {
    fn ready(&mut self) -> Option<SseEvent> {
        self.pending.pop_front()
    }

    fn finished(&self) -> bool {
        self.finished
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
}

impl<F> Chunks<F> {
    fn fail(&mut self, error: BackendError) {
        let error = ApiError::from(error);
        tracing::warn!(%error, "generation failed mid-stream");
        self.pending
            .push_back(Event::default().json_data(error.body()));
        self.finished = true;
    }
}
