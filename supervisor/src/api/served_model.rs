//! Which model a response answered for, attached to the response's extensions so the layers
//! around the API (the metrics count requests by model) learn it without reading the body again.

use axum::response::{IntoResponse, Response};

use super::backend::Backend;

/// The canonical id of the requested model; `None` when the name is no model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedModel(pub Option<String>);

impl ServedModel {
    pub fn resolve<B: Backend>(backend: &B, name: &str) -> Self {
        ServedModel(backend.resolve(name))
    }

    pub fn attach(self, response: impl IntoResponse) -> Response {
        let mut response = response.into_response();
        response.extensions_mut().insert(self);
        response
    }
}
