//! The Anthropic Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::backend::Backend;

pub async fn messages<B: Backend>(State(_backend): State<Arc<B>>, _request: Request) -> Response {
    StatusCode::NOT_IMPLEMENTED.into_response()
}

pub async fn count_tokens<B: Backend>(
    State(_backend): State<Arc<B>>,
    _request: Request,
) -> Response {
    StatusCode::NOT_IMPLEMENTED.into_response()
}
