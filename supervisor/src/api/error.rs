//! Every error the HTTP API can answer with, and the one place that maps each to a status code
//! and an OpenAI-shaped body: `{"error": {"message", "type", "code", "param"}}`.
//!
//! OpenAI clients parse that body to show the message, so every failure goes through here:
//! validation, extractor rejections (malformed JSON, wrong content type, oversized body), unknown
//! routes, and the backend's errors, including the final SSE event of a stream that failed.

use std::borrow::Cow;

use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use corral_ipc::{ModelKind, RejectKind};
use serde::Serialize;

use super::backend::BackendError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request body is well-formed JSON but asks for something invalid or unsupported.
    #[error("{message}")]
    InvalidRequest {
        message: String,
        /// The request field at fault, reported as OpenAI's `param` (`tools[2].function.name`).
        param: Cow<'static, str>,
    },
    /// The body is not JSON of the expected shape (syntax, types, content type, encoding).
    #[error("{0}")]
    MalformedBody(String),
    #[error("the request body is larger than the server accepts")]
    BodyTooLarge,
    #[error("the model `{0}` does not exist")]
    ModelNotFound(String),
    /// A chat request to an embedding model, an embeddings request to a chat model...
    #[error("the model `{model}` is {} model and cannot answer {} requests; {}", a_kind(*.kind), wanted_requests(*.wanted), endpoint_hint(*.kind))]
    WrongModelKind {
        model: String,
        kind: ModelKind,
        /// The kind the called endpoint needs.
        wanted: ModelKind,
    },
    /// A `/v1/responses/{id}` that was never stored, was deleted or was evicted.
    #[error("No response found with id '{0}'.")]
    ResponseNotFound(String),
    /// OpenAI answers an unknown `previous_response_id` with a 404 naming it.
    #[error("Previous response with id '{0}' not found.")]
    PreviousResponseNotFound(String),
    #[error("no route for {method} {path}")]
    RouteNotFound { method: String, path: String },
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// One input of an embeddings or rerank request is longer than the model takes; a 400 as
    /// OpenAI answers it (a chat prompt too long stays a 413).
    #[error("{message}")]
    InputTooLong { message: String, param: String },
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl ApiError {
    pub fn invalid(message: impl Into<String>, param: impl Into<Cow<'static, str>>) -> Self {
        ApiError::InvalidRequest {
            message: message.into(),
            param: param.into(),
        }
    }

    /// The worker's refusal of an over-long input as a 400 naming it (`input[3]`); any other
    /// error unchanged.
    pub fn input_too_long(error: BackendError, default_param: &str) -> Self {
        match error {
            BackendError::Rejected {
                kind: RejectKind::PromptTooLong,
                message,
                param,
            } => ApiError::InputTooLong {
                message,
                param: param.unwrap_or_else(|| default_param.to_owned()),
            },
            other => ApiError::Backend(other),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidRequest { .. }
            | ApiError::MalformedBody(_)
            | ApiError::WrongModelKind { .. }
            | ApiError::InputTooLong { .. } => StatusCode::BAD_REQUEST,
            ApiError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::ModelNotFound(_)
            | ApiError::RouteNotFound { .. }
            | ApiError::ResponseNotFound(_)
            | ApiError::PreviousResponseNotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Backend(error) => backend_status(error),
        }
    }

    /// The OpenAI `error` object, also sent as the last event of a failed stream.
    pub fn body(&self) -> ErrorBody {
        let (kind, code, param) = self.classify();
        ErrorBody {
            error: ErrorDetail {
                message: self.to_string(),
                kind,
                code,
                param: param.map(str::to_owned),
            },
        }
    }

    /// The OpenAI `type`, `code` and `param` for this error.
    fn classify(&self) -> (&'static str, Option<&'static str>, Option<&str>) {
        const INVALID: &str = "invalid_request_error";
        const SERVER: &str = "server_error";
        match self {
            ApiError::InvalidRequest { param, .. } => (INVALID, None, Some(param)),
            ApiError::MalformedBody(_) => (INVALID, Some("invalid_json"), None),
            ApiError::InputTooLong { param, .. } => {
                (INVALID, Some("context_length_exceeded"), Some(param))
            }
            ApiError::BodyTooLarge => (INVALID, Some("request_too_large"), None),
            ApiError::ModelNotFound(_) | ApiError::Backend(BackendError::UnknownModel { .. }) => {
                ("not_found_error", Some("model_not_found"), Some("model"))
            }
            ApiError::Backend(BackendError::Unservable { .. }) => {
                (INVALID, Some("model_not_servable"), Some("model"))
            }
            ApiError::WrongModelKind { .. } => {
                (INVALID, Some("model_not_supported"), Some("model"))
            }
            ApiError::RouteNotFound { .. } => ("not_found_error", Some("unknown_url"), None),
            ApiError::ResponseNotFound(_) => (INVALID, Some("response_not_found"), None),
            ApiError::PreviousResponseNotFound(_) => (
                INVALID,
                Some("previous_response_not_found"),
                Some("previous_response_id"),
            ),
            ApiError::MethodNotAllowed { .. } => (INVALID, Some("method_not_allowed"), None),
            ApiError::Backend(BackendError::Rejected { kind, param, .. }) => match kind {
                RejectKind::PromptTooLong => (INVALID, Some("context_length_exceeded"), None),
                RejectKind::PrefillMemory => (INVALID, Some("prompt_too_large_for_memory"), None),
                RejectKind::InvalidRequest => (INVALID, None, param.as_deref()),
                RejectKind::Overloaded => (SERVER, Some("overloaded"), None),
                RejectKind::ShuttingDown => (SERVER, Some("shutting_down"), None),
                RejectKind::Unsupported => {
                    (INVALID, Some("unsupported_for_model"), param.as_deref())
                }
            },
            ApiError::Backend(BackendError::Unavailable { .. }) => {
                (SERVER, Some("model_unavailable"), None)
            }
            ApiError::Backend(BackendError::InsufficientMemory { .. }) => {
                (SERVER, Some("insufficient_memory"), None)
            }
            ApiError::Backend(BackendError::ContextOverflow(_)) => {
                (INVALID, Some("context_length_exceeded"), Some("messages"))
            }
            ApiError::Backend(BackendError::WorkerFailed { .. }) => {
                (SERVER, Some("worker_failed"), None)
            }
            ApiError::Backend(BackendError::Internal { .. }) => (SERVER, None, None),
        }
    }
}

fn a_kind(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Chat => "a chat",
        ModelKind::Embedding => "an embedding",
        ModelKind::Rerank => "a rerank",
    }
}

fn wanted_requests(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Chat => "chat or completion",
        ModelKind::Embedding => "embeddings",
        ModelKind::Rerank => "rerank",
    }
}

/// Where the model's own requests go.
fn endpoint_hint(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Chat => {
            "it answers /v1/chat/completions, /v1/completions, /v1/responses and /v1/messages"
        }
        ModelKind::Embedding => "it answers /v1/embeddings",
        ModelKind::Rerank => "it answers /v1/rerank",
    }
}

fn backend_status(error: &BackendError) -> StatusCode {
    match error {
        BackendError::UnknownModel { .. } => StatusCode::NOT_FOUND,
        BackendError::Unservable { .. } => StatusCode::BAD_REQUEST,
        BackendError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        BackendError::InsufficientMemory { .. } => StatusCode::INSUFFICIENT_STORAGE,
        BackendError::Rejected { kind, .. } => match kind {
            RejectKind::PrefillMemory => StatusCode::PAYLOAD_TOO_LARGE,
            RejectKind::PromptTooLong | RejectKind::InvalidRequest | RejectKind::Unsupported => {
                StatusCode::BAD_REQUEST
            }
            RejectKind::Overloaded | RejectKind::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        },
        BackendError::ContextOverflow(_) => StatusCode::BAD_REQUEST,
        BackendError::WorkerFailed { .. } => StatusCode::BAD_GATEWAY,
        BackendError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(status = status.as_u16(), error = %self, "request failed");
        }
        let mut response = (status, axum::Json(self.body())).into_response();
        if let ApiError::Backend(BackendError::Unavailable {
            retry_after_secs, ..
        }) = self
        {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
        }
        response
    }
}

/// axum's own rejections answer in plain text with 415 or 422; OpenAI clients expect 400 (413
/// for an oversized body) with the JSON error body.
impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::BodyTooLarge
        } else {
            ApiError::MalformedBody(rejection.body_text())
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub code: Option<&'static str>,
    pub param: Option<String>,
}
