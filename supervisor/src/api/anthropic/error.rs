//! Errors in Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`, with its
//! statuses. Anthropic clients read `error.type` (the SDKs pick their exception class from the
//! status), so every answer of these routes, including malformed bodies, goes through here.
//!
//! The cause is still an [`ApiError`]: validation, the backend and the extractor share the OpenAI
//! routes' code, and only the last step, the status and body, differs.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use corral_ipc::RejectKind;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::backend::BackendError;
use crate::api::error::ApiError;
use crate::api::images::ImageError;

/// Anthropic's status for an overloaded API, which its SDKs retry.
const OVERLOADED: u16 = 529;

#[derive(Debug)]
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(error: ApiError) -> Self {
        AnthropicError(error)
    }
}

impl From<BackendError> for AnthropicError {
    fn from(error: BackendError) -> Self {
        AnthropicError(error.into())
    }
}

impl From<ImageError> for AnthropicError {
    fn from(error: ImageError) -> Self {
        AnthropicError::invalid(error.to_string())
    }
}

impl From<JsonRejection> for AnthropicError {
    fn from(rejection: JsonRejection) -> Self {
        AnthropicError(rejection.into())
    }
}

impl AnthropicError {
    pub fn invalid(message: impl Into<String>) -> Self {
        // Anthropic's errors carry no `param`; the message names the field.
        AnthropicError(ApiError::invalid(message, ""))
    }

    /// Anthropic's status and `error.type`. A prompt too long is its 400 (Claude Code reads
    /// that as "compact the conversation"); corral's 503 is its 529.
    fn classify(&self) -> (StatusCode, &'static str) {
        const INVALID: &str = "invalid_request_error";
        let status = self.0.status();
        match &self.0 {
            ApiError::BodyTooLarge => (status, "request_too_large"),
            ApiError::Backend(BackendError::ContextOverflow(_))
            | ApiError::Backend(BackendError::Rejected {
                kind: RejectKind::PromptTooLong | RejectKind::PrefillMemory,
                ..
            }) => (StatusCode::BAD_REQUEST, INVALID),
            _ if status == StatusCode::NOT_FOUND => (status, "not_found_error"),
            _ if status == StatusCode::SERVICE_UNAVAILABLE => (
                StatusCode::from_u16(OVERLOADED).unwrap_or(status),
                "overloaded_error",
            ),
            _ if status.is_server_error() => (status, "api_error"),
            _ => (status, INVALID),
        }
    }

    /// The `error` object, also the data of a stream's `error` event.
    pub fn body(&self) -> ErrorBody {
        let (_, kind) = self.classify();
        ErrorBody::new(kind, self.message())
    }

    /// Anthropic's own wording where a client acts on it: Claude Code offers to compact the
    /// conversation when it reads `prompt is too long: N tokens > M maximum`.
    fn message(&self) -> String {
        match &self.0 {
            ApiError::Backend(BackendError::ContextOverflow(overflow)) => format!(
                "prompt is too long: {} tokens > {} maximum",
                overflow.prompt_tokens, overflow.context_tokens
            ),
            error => error.to_string(),
        }
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let (status, _) = self.classify();
        if status.is_server_error() {
            tracing::warn!(status = status.as_u16(), error = %self.0, "request failed");
        }
        let mut response = (status, Json(self.body())).into_response();
        if let ApiError::Backend(BackendError::Unavailable {
            retry_after_secs, ..
        }) = self.0
        {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
        }
        response
    }
}

#[derive(Debug, Serialize)]
pub struct ErrorBody {
    #[serde(rename = "type")]
    kind: &'static str,
    error: ErrorDetail,
}

#[derive(Debug, Serialize)]
struct ErrorDetail {
    #[serde(rename = "type")]
    kind: &'static str,
    message: String,
}

impl ErrorBody {
    pub fn new(kind: &'static str, message: String) -> Self {
        ErrorBody {
            kind: "error",
            error: ErrorDetail { kind, message },
        }
    }
}

/// axum's JSON extractor with its rejections (malformed JSON, wrong content type, a body over
/// the limit) answered in Anthropic's shape.
pub struct AnthropicJson<T>(pub T);

impl<T, S> FromRequest<S> for AnthropicJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = AnthropicError;

    async fn from_request(request: Request, state: &S) -> Result<Self, AnthropicError> {
        let Json(value) = Json::<T>::from_request(request, state).await?;
        Ok(AnthropicJson(value))
    }
}

/// Whether `path` is one of this API's, whose every answer (401s and unknown sub-routes too)
/// must be in Anthropic's shape.
pub fn is_anthropic_route(path: &str) -> bool {
    path == "/v1/messages" || path.starts_with("/v1/messages/")
}
