//! The OpenAI Responses API: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::backend::Backend;

pub async fn create<B: Backend>(State(_backend): State<Arc<B>>, _request: Request) -> Response {
    StatusCode::NOT_IMPLEMENTED.into_response()
}

pub async fn retrieve<B: Backend>(State(_backend): State<Arc<B>>, _request: Request) -> Response {
    StatusCode::NOT_IMPLEMENTED.into_response()
}

pub async fn delete<B: Backend>(State(_backend): State<Arc<B>>, _request: Request) -> Response {
    StatusCode::NOT_IMPLEMENTED.into_response()
}
