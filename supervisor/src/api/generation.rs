//! Running one generation for a handler: resolve the model, start it on the backend (which
//! returns once the worker accepted: only then is the HTTP status known), and, for
//! non-streaming responses, gather every event into one result.

use corral_ipc::{FinishReason, GenerateRequest, ModelKind, TokenLogprob, ToolCall, Usage};

use super::backend::{Backend, BackendError, GenerationStream, StreamEvent};
use super::error::ApiError;

/// A generation the worker has accepted.
pub struct Started {
    /// The canonical model id, reported back to the client.
    pub model: String,
    pub events: GenerationStream,
}

pub async fn start<B: Backend>(
    backend: &B,
    name: &str,
    request: GenerateRequest,
) -> Result<Started, ApiError> {
    let model = resolve_kind(backend, name, ModelKind::Chat)?;
    let events = backend.generate(&model, request).await?;
    Ok(Started { model, events })
}

/// The canonical id of `name`, if it names a model of the kind `wanted`.
pub fn resolve_kind<B: Backend>(
    backend: &B,
    name: &str,
    wanted: ModelKind,
) -> Result<String, ApiError> {
    let model = backend
        .resolve(name)
        .ok_or_else(|| ApiError::ModelNotFound(name.to_owned()))?;
    let kind = backend.kind(&model);
    if kind != wanted {
        return Err(ApiError::WrongModelKind {
            model,
            kind,
            wanted,
        });
    }
    Ok(model)
}

/// The error for an event stream that closed before `Done` or `Failed`.
pub fn ended_early() -> BackendError {
    BackendError::WorkerFailed {
        message: "the worker ended the request without finishing it".to_owned(),
    }
}

/// A whole generation, for a non-streaming response.
pub struct Collected {
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    /// `Some` when the worker reported logprobs (the client asked for them).
    pub logprobs: Option<Vec<TokenLogprob>>,
    pub finish_reason: FinishReason,
    /// The stop string that ended the answer, when one did.
    pub stop_sequence: Option<String>,
    pub usage: Usage,
}

pub async fn collect(mut events: GenerationStream) -> Result<Collected, ApiError> {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    let mut logprobs: Option<Vec<TokenLogprob>> = None;
    loop {
        match events.next().await {
            Some(StreamEvent::Delta {
                text: delta,
                reasoning: delta_reasoning,
                tool_calls: delta_calls,
                logprobs: delta_logprobs,
                ..
            }) => {
                text.push_str(&delta);
                reasoning.push_str(&delta_reasoning);
                tool_calls.extend(delta_calls);
                if let Some(delta_logprobs) = delta_logprobs {
                    logprobs.get_or_insert_default().extend(delta_logprobs);
                }
            }
            Some(StreamEvent::Done {
                finish_reason,
                stop_sequence,
                usage,
            }) => {
                return Ok(Collected {
                    text,
                    reasoning,
                    tool_calls,
                    logprobs,
                    finish_reason,
                    stop_sequence,
                    usage,
                });
            }
            Some(StreamEvent::Failed { message }) => {
                return Err(BackendError::WorkerFailed { message }.into());
            }
            None => return Err(ended_early().into()),
        }
    }
}
