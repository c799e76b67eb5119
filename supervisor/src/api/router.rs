//! The routes of the OpenAI API and the layers every request goes through.
//!
//! Unknown routes and wrong methods answer with the OpenAI error body too (Anthropic's under
//! `/v1/messages`), and the body size limit is enforced by `DefaultBodyLimit`, which the JSON
//! extractors report as a 413 in their shape, so no response from this router is ever axum's
//! plain text.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Extension};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::backend::Backend;
use super::error::ApiError;
use super::images::ImageFetch;
use super::{anthropic, chat, completions, embeddings, models, rerank, responses};

/// Anthropic's own request limit: long chats with tool definitions and their images as base64;
/// larger bodies are refused before parsing.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// `responses_store_size` bounds the Responses API's store of finished responses; `images`
/// fetches the image URLs of chat prompts.
pub fn router<B: Backend>(
    backend: Arc<B>,
    responses_store_size: usize,
    images: ImageFetch,
) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::handler::<B>))
        .route("/v1/completions", post(completions::handler::<B>))
        .route("/v1/messages", post(anthropic::messages::<B>))
        .route(
            "/v1/messages/count_tokens",
            post(anthropic::count_tokens::<B>),
        )
        .route("/v1/responses", post(responses::create::<B>))
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route("/v1/embeddings", post(embeddings::handler::<B>))
        .route("/v1/rerank", post(rerank::handler::<B>))
        .route("/rerank", post(rerank::handler::<B>))
        .route("/v1/models", get(models::list::<B>))
        .route("/v1/models/{model}", get(models::get::<B>))
        .route("/health", get(models::health::<B>))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(Extension(Arc::new(responses::ResponseStore::new(
            responses_store_size,
        ))))
        .layer(Extension(Arc::new(images)))
        .with_state(backend)
}

async fn not_found(method: Method, uri: Uri) -> Response {
    let error = ApiError::RouteNotFound {
        method: method.to_string(),
        path: uri.path().to_owned(),
    };
    in_the_routes_shape(&uri, error)
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let error = ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_owned(),
    };
    in_the_routes_shape(&uri, error)
}

/// Anthropic's clients get Anthropic's error shape even from a route that does not exist.
fn in_the_routes_shape(uri: &Uri, error: ApiError) -> Response {
    if anthropic::is_anthropic_route(uri.path()) {
        return anthropic::error_response(error);
    }
    error.into_response()
}
