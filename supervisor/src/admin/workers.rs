//! `GET /admin/workers`: one row per registered model with its pool state and, for a ready
//! worker, the counters the worker reports itself.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::extract::State;
use corral_ipc::WorkerStats;
use serde::Serialize;

use super::Admin;
use crate::pool::{EntrySnapshot, Phase};

#[derive(Debug, Serialize)]
pub struct WorkerList {
    pub object: &'static str,
    pub data: Vec<WorkerRow>,
}

#[derive(Debug, Serialize)]
pub struct WorkerRow {
    pub model: String,
    /// `not_running`, `starting`, `ready`, `stopping` or `failed`.
    pub state: &'static str,
    pub stop_reason: Option<String>,
    pub pid: Option<u32>,
    pub leases: u32,
    pub pinned: bool,
    pub restarts: u64,
    /// Seconds since the current start, readiness or stop began.
    pub state_secs: Option<f64>,
    /// The worker's own counters; absent unless it is ready and answered in time.
    pub stats: Option<WorkerStats>,
    /// Why `stats` is absent although the worker is ready.
    pub stats_error: Option<String>,
}

pub async fn list(State(admin): State<Arc<Admin>>) -> Json<WorkerList> {
    let snapshots = admin.pool.snapshot();
    let now = Instant::now();
    let mut data = Vec::new();
    for entry in admin.registry.entries() {
        let snapshot = snapshots.iter().find(|snapshot| snapshot.model == entry.id);
        let (stats, stats_error) = match admin.pool.ready_worker(&entry.id) {
            Some(worker) => match worker.handle.stats().await {
                Ok(stats) => (Some(stats), None),
                Err(error) => (None, Some(error.to_string())),
            },
            None => (None, None),
        };
        data.push(row(&entry.id, snapshot, now, stats, stats_error));
    }
    Json(WorkerList {
        object: "list",
        data,
    })
}

fn row(
    model: &str,
    snapshot: Option<&EntrySnapshot>,
    now: Instant,
    stats: Option<WorkerStats>,
    stats_error: Option<String>,
) -> WorkerRow {
    let phase = snapshot.map_or(Phase::NotRunning, |snapshot| snapshot.phase);
    let (state, stop_reason) = match phase {
        Phase::NotRunning => ("not_running", None),
        Phase::Starting => ("starting", None),
        Phase::Ready => ("ready", None),
        Phase::Stopping(reason) => ("stopping", Some(format!("{reason:?}").to_lowercase())),
        Phase::Failed => ("failed", None),
    };
    WorkerRow {
        model: model.to_owned(),
        state,
        stop_reason,
        pid: snapshot.and_then(|snapshot| snapshot.pid),
        leases: snapshot.map_or(0, |snapshot| snapshot.leases),
        pinned: snapshot.is_some_and(|snapshot| snapshot.pinned),
        restarts: snapshot.map_or(0, |snapshot| snapshot.restarts),
        state_secs: snapshot
            .and_then(|snapshot| snapshot.since)
            .map(|since| now.saturating_duration_since(since).as_secs_f64()),
        stats,
        stats_error,
    }
}
