//! The operators' JSON API under `/admin`: what each model's worker is doing right now.
//!
//! It reads the pool's snapshot and asks each ready worker for its own counters over the
//! worker's connection, without taking a lease, so looking never keeps a worker from being
//! stopped.

mod memory;
mod workers;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

use crate::eviction::MemoryManager;
use crate::pool::Pool;
use crate::process::ProcessLauncher;
use crate::registry::Registry;

pub struct Admin {
    pub pool: Pool<ProcessLauncher>,
    pub registry: Arc<Registry>,
    pub memory: Arc<MemoryManager<ProcessLauncher>>,
}

pub fn router(admin: Arc<Admin>) -> Router {
    Router::new()
        .route("/admin/workers", get(workers::list))
        .route("/admin/memory", get(memory::show))
        .with_state(admin)
}
