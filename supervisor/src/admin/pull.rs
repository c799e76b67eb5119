//! `POST /admin/models/pull`: `corral pull` for operators, with `{"model": "ORG/NAME",
//! "revision": "main", "file": "x.gguf"}` (revision and file optional).
//!
//! Everything that can be refused before a download starts (a bad name, a repository that is
//! missing, gated or without usable weights) is an ordinary error in the admin routes' shape.
//! Once the hub has agreed, the answer is 200 with a stream of newline-delimited JSON
//! (`application/x-ndjson`): the pull's events (`resolved`, `downloading`, `cached`), then one
//! `{"status": "done", ...}` or `{"status": "error", "message": ...}`. The download runs in its
//! own task: a client that leaves does not stop it. After a pull the registry is scanned again,
//! so the model is served without a restart.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Admin;
use super::error::AdminError;
use crate::pull::{self, Hub, ModelRef, Plan, Revision};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullBody {
    /// `ORG/NAME`, or `ORG/NAME@REVISION`.
    model: String,
    revision: Option<String>,
    /// The `.gguf` to take from a repository with several.
    file: Option<String>,
}

impl PullBody {
    fn model(&self) -> Result<ModelRef, AdminError> {
        let mut model = ModelRef::parse(&self.model)?;
        if let Some(revision) = &self.revision {
            if model.revision.is_some() {
                return Err(AdminError::InvalidBody(
                    "give the revision as `model@REVISION` or as `revision`, not both".to_owned(),
                ));
            }
            model.revision = Some(Revision::parse(revision)?);
        }
        Ok(model)
    }
}

pub async fn pull(
    State(admin): State<Arc<Admin>>,
    body: Result<Json<PullBody>, JsonRejection>,
) -> Result<Response, AdminError> {
    let Json(body) = body.map_err(|rejection| AdminError::InvalidBody(rejection.body_text()))?;
    let model = body.model()?;
    let hub = Hub::from_env(None)?;
    let plan = pull::plan(&hub, &model, body.file.as_deref()).await?;
    let (lines, receiver) = mpsc::unbounded_channel();
    tokio::spawn(download(plan, admin, lines));
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let line = receiver.recv().await?;
        Some((Ok::<_, Infallible>(line), receiver))
    });
    Ok((
        [(CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Runs the download, sending each event as a line, then the outcome.
async fn download(plan: Plan, admin: Arc<Admin>, lines: mpsc::UnboundedSender<String>) {
    // Events are few (about a hundred per file), so the channel needs no bound.
    let send = |value: Value| {
        let _ = lines.send(format!("{value}\n"));
    };
    let mut progress = |event| send(json!(event));
    let last = match plan.download(&mut progress).await {
        Ok(pulled) => {
            tracing::info!(model = %pulled.model, path = %pulled.path.display(), "pulled");
            // The ids the pulled files are now served under: usually `ORG/NAME`; none when the
            // scan failed or the registry serves another revision of the repository.
            let served_as: Vec<String> = match admin.registry.rescan().await {
                Ok(registry) => registry
                    .entries()
                    .filter(|entry| entry.path.starts_with(&pulled.snapshot) && entry.is_servable())
                    .map(|entry| entry.id.clone())
                    .collect(),
                Err(error) => {
                    tracing::warn!(error = format!("{error:#}"), "scanning after a pull");
                    Vec::new()
                }
            };
            json!({
                "status": "done",
                "model": pulled.model,
                "commit": pulled.commit,
                "path": pulled.path,
                "served_as": served_as,
            })
        }
        Err(error) => {
            let message = format!("{:#}", anyhow::Error::new(error));
            tracing::warn!(message, "pull failed");
            json!({"status": "error", "message": message})
        }
    };
    send(last);
}
