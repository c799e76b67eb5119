//! The Anthropic Messages API, `POST /v1/messages` and `POST /v1/messages/count_tokens`, for
//! Claude Code and Anthropic's SDKs: a translation layer over the same worker requests as the
//! OpenAI chat route (`request.rs`, `content.rs`), answering in Anthropic's shapes
//! (`response.rs`, `stream.rs`) and errors (`error.rs`).
//!
//! Headers: `x-api-key` is checked like a bearer key (`auth.rs`); `anthropic-version` and
//! `anthropic-beta` are accepted and ignored, since one behaviour serves every version. Server
//! tools are left out of the prompt and named in a header (`api::hosted_tools`).

mod content;
mod error;
mod request;
mod response;
mod stream;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use self::error::{AnthropicError, AnthropicJson};
use self::request::MessagesRequest;
use self::response::Message;
use super::backend::Backend;
use super::images::{self, ImageFetch};
use super::{generation, served_model};

pub use self::error::is_anthropic_route;

/// An error of the shared layers (routing) in this API's shape.
pub fn error_response(error: super::error::ApiError) -> Response {
    AnthropicError(error).into_response()
}

pub async fn messages<B: Backend>(
    State(backend): State<Arc<B>>,
    Extension(fetch): Extension<Arc<ImageFetch>>,
    AnthropicJson(body): AnthropicJson<MessagesRequest>,
) -> Response {
    let served = served_model::resolve(backend.as_ref(), &body.model);
    served.attach(respond(backend, &fetch, body).await)
}

async fn respond<B: Backend>(
    backend: Arc<B>,
    fetch: &ImageFetch,
    body: MessagesRequest,
) -> Result<Response, AnthropicError> {
    let max_tokens = body
        .max_tokens
        .ok_or_else(|| AnthropicError::invalid("max_tokens: field required"))?;
    let name = body.model.clone();
    let stream = body.stream();
    let (mut request, dropped, pending) = body.into_generate(max_tokens)?;
    images::attach(fetch, &mut request, pending).await?;
    dropped.log_new("/v1/messages");
    let started = generation::start(backend.as_ref(), &name, request).await?;
    if stream {
        return Ok(dropped.attach(stream::response(started.events, name).into_response()));
    }
    let collected = generation::collect(started.events).await?;
    Ok(dropped.attach(Json(Message::new(name, collected)).into_response()))
}

/// The prompt's length as the model's own template and tokenizer make it: the worker renders
/// and tokenizes the same request, images included, and generates nothing.
pub async fn count_tokens<B: Backend>(
    State(backend): State<Arc<B>>,
    Extension(fetch): Extension<Arc<ImageFetch>>,
    AnthropicJson(body): AnthropicJson<MessagesRequest>,
) -> Response {
    let served = served_model::resolve(backend.as_ref(), &body.model);
    served.attach(count(backend, &fetch, body).await)
}

async fn count<B: Backend>(
    backend: Arc<B>,
    fetch: &ImageFetch,
    body: MessagesRequest,
) -> Result<Response, AnthropicError> {
    let name = body.model.clone();
    let (mut request, _, pending) = body.into_generate(1)?;
    images::attach(fetch, &mut request, pending).await?;
    request.count_only = true;
    let started = generation::start(backend.as_ref(), &name, request).await?;
    let input_tokens = started.events.prompt_tokens;
    // Waiting for `Done` ends the request cleanly: a dropped stream would send a `Cancel`.
    generation::collect(started.events).await?;
    Ok(Json(json!({"input_tokens": input_tokens})).into_response())
}
