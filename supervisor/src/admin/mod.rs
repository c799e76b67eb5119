//! The operators' API: what each model's worker is doing (`/admin/workers`), the memory budget
//! (`/admin/memory`), starting, stopping and pinning models on request (`control.rs`), pulling
//! one from the Hugging Face hub (`pull.rs`), the live requests, the last hour and the log for
//! the dashboard (`activity.rs`), and the Prometheus scrape (`/metrics`, `scrape.rs`).
//!
//! Looking never takes a lease, so it never keeps a worker from being stopped. Model names in
//! paths are only looked up in the registry.

mod activity;
mod control;
mod error;
mod memory;
mod pull;
mod scrape;
mod workers;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

pub use error::AdminError;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::pool::Pool;
use crate::process::WorkerProcesses;
use crate::registry::SharedRegistry;

pub struct Admin {
    pub pool: Pool<WorkerProcesses>,
    pub registry: Arc<SharedRegistry>,
    pub config: Arc<Config>,
    pub metrics: Arc<Metrics>,
}

impl Admin {
    /// The canonical id of a model name or alias from a path.
    fn resolve(&self, name: &str) -> Result<String, AdminError> {
        self.registry
            .current()
            .resolve(name)
            .map(str::to_owned)
            .ok_or_else(|| AdminError::UnknownModel(name.to_owned()))
    }
}

/// The operators' routes: reading them needs an API key when keys are configured, acting
/// through them the admin key when one is (`auth.rs`).
pub fn router(admin: Arc<Admin>) -> Router {
    Router::new()
        .route("/admin/workers", get(workers::list))
        .route("/admin/memory", get(memory::show))
        .route("/metrics", get(scrape::show))
        .route("/admin/activity", get(activity::activity))
        .route("/admin/history", get(activity::history))
        .route("/admin/logs", get(activity::logs))
        .route("/admin/workers/{model}/pin", post(control::pin))
        .route("/admin/workers/{org}/{name}/pin", post(control::pin_scoped))
        .route("/admin/models/pull", post(pull::pull))
        .route("/admin/workers/{model}/kill", post(control::kill))
        .route(
            "/admin/workers/{org}/{name}/kill",
            post(control::kill_scoped),
        )
        .route("/v1/models/status", get(control::status))
        .route("/v1/models/{model}/load", post(control::load))
        .route("/v1/models/{org}/{name}/load", post(control::load_scoped))
        .route("/v1/models/{model}/unload", post(control::unload))
        .route(
            "/v1/models/{org}/{name}/unload",
            post(control::unload_scoped),
        )
        .with_state(admin)
}
