//! `GET /v1/models`, `GET /v1/models/{model}` and `GET /health`: what can be served, and
//! whether the server answers at all.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use corral_ipc::ModelKind;
use serde::{Deserialize, Serialize};

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
    /// `chat`, `embedding` or `rerank`: which endpoints the model answers (an extension field,
    /// as llama.cpp and LM Studio add their own).
    pub kind: ModelKind,
    /// Whether the model reads images (an extension field, as LM Studio's and Ollama's model
    /// listings say so).
    pub vision: bool,
}

impl From<ModelCard> for ModelObject {
    fn from(card: ModelCard) -> Self {
        ModelObject {
            id: card.id,
            object: "model",
            created: card.created,
            owned_by: "corral",
            kind: card.kind,
            vision: card.vision,
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

/// `GET /health`: 200 `{"status":"ok"}` once the server is ready, that is once every pinned
/// model is; else 503 `{"status":"starting"}` (`"unavailable"` when one has failed), so a load
/// balancer or a service manager's probe can tell a server that answers from one that serves.
/// `?verbose=1` adds each pinned model's state.
#[derive(Debug, Serialize)]
pub struct Health {
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned: Option<Vec<PinnedState>>,
}

#[derive(Debug, Serialize)]
pub struct PinnedState {
    pub id: String,
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

#[derive(Debug, Deserialize)]
pub struct HealthQuery {
    #[serde(default)]
    verbose: Option<String>,
}

pub async fn health<B: Backend>(
    State(backend): State<Arc<B>>,
    Query(query): Query<HealthQuery>,
) -> (StatusCode, Json<Health>) {
    let pinned = backend.pinned_models();
    let (code, status) = if pinned.iter().all(|model| model.state == "ready") {
        (StatusCode::OK, "ok")
    } else if pinned.iter().any(|model| model.state == "failed") {
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    };
    let verbose = query
        .verbose
        .is_some_and(|value| !matches!(value.as_str(), "" | "0" | "false"));
    let pinned = verbose.then(|| {
        pinned
            .into_iter()
            .map(|model| PinnedState {
                id: model.id,
                state: model.state,
                pid: model.pid,
            })
            .collect()
    });
    (code, Json(Health { status, pinned }))
}
