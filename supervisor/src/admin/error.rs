//! Errors of the admin and model-control routes, in the same OpenAI shape as the API's:
//! `{"error": {"message", "type", "code", "param"}}`, so every client parses one format.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::pool::{AcquireError, StopError};

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
            AdminError::Unservable { .. } => {
                (StatusCode::BAD_REQUEST, INVALID, "model_not_servable")
            }
            AdminError::UnknownSignal(_) => (StatusCode::BAD_REQUEST, INVALID, "unknown_signal"),
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

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let (status, kind, code) = self.parts();
        let body = json!({
            "error": {"message": self.to_string(), "type": kind, "code": code, "param": null}
        });
        (status, axum::Json(body)).into_response()
    }
}
