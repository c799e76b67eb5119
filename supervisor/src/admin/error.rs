//! Errors of the admin and model-control routes, in the same OpenAI shape as the API's:
//! `{"error": {"message", "type", "code", "param"}}`, so every client parses one format.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::pool::{AcquireError, StopError};
use crate::pull::PullError;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("the model `{0}` does not exist")]
    UnknownModel(String),
    #[error("the model `{model}` cannot be served: {reason}")]
    Unservable { model: String, reason: String },
    #[error(
        "unknown signal `{0}`; use SIGKILL, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2"
    )]
    UnknownSignal(String),
    #[error("invalid request body: {0}")]
    InvalidBody(String),
    #[error(transparent)]
    Pull(#[from] PullError),
    #[error(transparent)]
    Stop(#[from] StopError),
    #[error(transparent)]
    Acquire(#[from] AcquireError),
}

impl AdminError {
    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        const INVALID: &str = "invalid_request_error";
        match self {
            AdminError::UnknownModel(_) => {
                (StatusCode::NOT_FOUND, "not_found_error", "model_not_found")
            }
            AdminError::Unservable { .. }
            | AdminError::Acquire(AcquireError::Unservable { .. }) => {
                (StatusCode::BAD_REQUEST, INVALID, "model_not_servable")
            }
            AdminError::UnknownSignal(_) => (StatusCode::BAD_REQUEST, INVALID, "unknown_signal"),
            AdminError::InvalidBody(_) => (StatusCode::BAD_REQUEST, INVALID, "invalid_body"),
            AdminError::Pull(error) => pull_parts(error),
            AdminError::Stop(StopError::NotRunning { .. }) => {
                (StatusCode::CONFLICT, INVALID, "model_not_running")
            }
            AdminError::Stop(StopError::DrainTimeout { .. }) => {
                (StatusCode::CONFLICT, INVALID, "drain_timeout")
            }
            AdminError::Acquire(AcquireError::Refused { .. }) => (
                StatusCode::INSUFFICIENT_STORAGE,
                "server_error",
                "insufficient_memory",
            ),
            AdminError::Acquire(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "model_unavailable",
            ),
        }
    }
}

/// A pull refused before its stream started. The hub's refusals keep their meaning (404, 403);
/// any other failure of the hub is a bad gateway.
fn pull_parts(error: &PullError) -> (StatusCode, &'static str, &'static str) {
    const INVALID: &str = "invalid_request_error";
    match error {
        PullError::InvalidName(_) => (StatusCode::BAD_REQUEST, INVALID, "invalid_model_id"),
        PullError::InvalidRevision(_) => (StatusCode::BAD_REQUEST, INVALID, "invalid_revision"),
        PullError::NotAGgufFile(_) | PullError::FileNotInRepo { .. } => {
            (StatusCode::BAD_REQUEST, INVALID, "invalid_file")
        }
        PullError::SeveralGgufs { .. } => (StatusCode::BAD_REQUEST, INVALID, "file_required"),
        PullError::NoUsableWeights { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            INVALID,
            "no_usable_weights",
        ),
        PullError::NotFound { .. } => (StatusCode::NOT_FOUND, "not_found_error", "hub_not_found"),
        PullError::Unauthorized { .. } => (StatusCode::FORBIDDEN, INVALID, "hub_model_gated"),
        PullError::Busy { .. } => (StatusCode::CONFLICT, INVALID, "pull_in_progress"),
        PullError::Io { .. } | PullError::NoCacheDir | PullError::Client(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "pull_failed",
        ),
        _ => (StatusCode::BAD_GATEWAY, "server_error", "hub_error"),
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let (status, kind, code) = self.parts();
        let body = json!({
            "error": {"message": self.to_string(), "type": kind, "code": code, "param": null}
        });
        (status, axum::Json(body)).into_response()
    }
}
