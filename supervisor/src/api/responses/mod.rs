//! The OpenAI Responses API: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`.
//!
//! A translation over the chat path: the request becomes the same chat-shaped worker request
//! (`request.rs`, `items.rs`), and the answer is reshaped into output items (`object.rs`), whole
//! or as semantic stream events (`stream.rs`). Finished responses go into a bounded in-memory
//! store (`store.rs`), which `previous_response_id` continues from.

mod items;
mod object;
mod request;
mod store;
mod stream;
mod tools;

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub use store::ResponseStore;

use self::object::{ResponseObject, output_items};
use self::request::CreateRequest;
use self::store::Recorder;
use super::backend::Backend;
use super::error::ApiError;
use super::extract::ApiJson;
use super::generation;
use super::images::{self, ImageFetch};
use super::served_model;

/// Answers like `respond`, tagged with the requested model for the metrics.
pub async fn create<B: Backend>(
    State(backend): State<Arc<B>>,
    Extension(store): Extension<Arc<ResponseStore>>,
    Extension(fetch): Extension<Arc<ImageFetch>>,
    ApiJson(body): ApiJson<CreateRequest>,
) -> Response {
    let served = served_model::resolve(backend.as_ref(), &body.model);
    served.attach(respond(backend, store, &fetch, body).await)
}

async fn respond<B: Backend>(
    backend: Arc<B>,
    store: Arc<ResponseStore>,
    fetch: &ImageFetch,
    body: CreateRequest,
) -> Result<Response, ApiError> {
    let name = body.model.clone();
    let mut prepared = body.prepare(&store)?;
    let pending = std::mem::take(&mut prepared.images);
    images::attach(fetch, &mut prepared.generate, pending).await?;
    let dropped = prepared.tools.dropped.clone();
    dropped.log_new("/v1/responses");
    let started = generation::start(backend.as_ref(), &name, prepared.generate).await?;
    let mut response = ResponseObject::in_progress(started.model, prepared.echo);
    let recorder = Recorder {
        store,
        conversation: prepared.conversation,
    };
    if prepared.stream {
        let events = stream::response(started.events, response, recorder, prepared.tools);
        return Ok(dropped.attach(events.into_response()));
    }
    let collected = generation::collect(started.events).await?;
    let reason = collected.finish_reason;
    let output = output_items(
        collected.reasoning,
        collected.text,
        collected.tool_calls,
        reason,
        &prepared.tools,
    );
    response.finish(output, reason, collected.usage);
    recorder.record(&response);
    Ok(dropped.attach(Json(response).into_response()))
}

pub async fn retrieve(
    Extension(store): Extension<Arc<ResponseStore>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let stored = store.get(&id).ok_or(ApiError::ResponseNotFound(id))?;
    Ok(Json(stored.response).into_response())
}

pub async fn delete(
    Extension(store): Extension<Arc<ResponseStore>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if !store.remove(&id) {
        return Err(ApiError::ResponseNotFound(id));
    }
    Ok(Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
}
