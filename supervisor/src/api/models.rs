//! `GET /v1/models`, `GET /v1/models/{model}` and `GET /health`: what can be served, and
//! whether the server answers at all.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;

use super::backend::{Backend, ModelCard};
use super::error::ApiError;

#[derive(Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelObject>,
}

#[derive(Debug, Serialize)]
pub struct ModelObject {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
}

impl From<ModelCard> for ModelObject {
    fn from(card: ModelCard) -> Self {
        ModelObject {
            id: card.id,
            object: "model",
            created: card.created,
            owned_by: "corral",
        }
    }
}

pub async fn list<B: Backend>(State(backend): State<Arc<B>>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: backend
            .models()
            .into_iter()
            .map(ModelObject::from)
            .collect(),
    })
}

/// Looks the name up as an alias too, and answers with the canonical model.
pub async fn get<B: Backend>(
    State(backend): State<Arc<B>>,
    Path(name): Path<String>,
) -> Result<Json<ModelObject>, ApiError> {
    let id = backend
        .resolve(&name)
        .ok_or_else(|| ApiError::ModelNotFound(name.clone()))?;
    backend
        .models()
        .into_iter()
        .find(|card| card.id == id)
        .map(|card| Json(card.into()))
        .ok_or(ApiError::ModelNotFound(name))
}

#[derive(Debug, Serialize)]
pub struct Health {
    pub status: &'static str,
}

pub async fn health() -> Json<Health> {
    Json(Health { status: "ok" })
}
