//! `GET /admin/workers`: one row per registered model with its pool state and, for a ready
//! worker, the counters the worker reports itself.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::extract::State;
use corral_ipc::{ModelKind, WorkerStats};
use serde::Serialize;

use super::Admin;
use crate::memory::process_footprint;
use crate::pool::{EntrySnapshot, Phase, Processes};
use crate::process::Rank;

#[derive(Debug, Serialize)]
pub struct WorkerList {
    pub object: &'static str,
    pub data: Vec<WorkerRow>,
}

#[derive(Debug, Serialize)]
pub struct RankRow {
    pub rank: usize,
    pub host: String,
    pub pid: u32,
    pub footprint_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct WorkerRow {
    pub model: String,
    /// `chat`, `embedding` or `rerank`.
    pub kind: ModelKind,
    /// `not_running`, `starting`, `ready`, `stopping` or `failed`.
    pub state: &'static str,
    pub stop_reason: Option<String>,
    pub pid: Option<u32>,
    pub leases: u32,
    pub pinned: bool,
    pub restarts: u64,
    /// Seconds since the current start, readiness or stop began.
    pub state_secs: Option<f64>,
    /// Seconds the ready worker has been up.
    pub uptime_secs: Option<f64>,
    /// Seconds since the ready worker last began or finished a request.
    pub idle_secs: Option<f64>,
    /// The process footprint now (RSS on Linux, `phys_footprint` on macOS); a worker group's
    /// ranks' together.
    pub footprint_bytes: Option<u64>,
    /// A worker group's ranks, rank 0 (`pid`) first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankRow>,
    /// What admission counts for the model before its worker starts; `None` when its files
    /// cannot be read.
    pub estimate_bytes: Option<u64>,
    /// How the model's previous worker ended, or why its last start failed.
    pub last_exit: Option<String>,
    /// The positions a sequence may hold, as the ready worker said.
    pub context_length: Option<u32>,
    /// The worker's own counters; absent unless it is ready and answered in time.
    pub stats: Option<WorkerStats>,
    /// Why `stats` is absent although the worker is ready.
    pub stats_error: Option<String>,
}

pub async fn list(State(admin): State<Arc<Admin>>) -> Json<WorkerList> {
    let snapshots = admin.pool.snapshot();
    let now = Instant::now();
    let mut data = Vec::new();
    for entry in admin.registry.current().entries() {
        let snapshot = snapshots.iter().find(|snapshot| snapshot.model == entry.id);
        let ready = admin.pool.ready_worker(&entry.id);
        let (stats, stats_error) = match &ready {
            Some(worker) => match worker.handle.stats().await {
                Ok(stats) => (Some(stats), None),
                Err(error) => (None, Some(error.to_string())),
            },
            None => (None, None),
        };
        let context_length = ready
            .as_ref()
            .and_then(|worker| worker.handle.context_length());
        let ranks = ready.map_or_else(Vec::new, |worker| rank_rows(worker.handle.ranks()));
        let estimate = Some(admin.pool.processes().estimate(&entry.id)).filter(|&bytes| bytes > 0);
        let mut row = row(
            &entry.id,
            entry.kind(),
            snapshot,
            now,
            (stats, stats_error),
            estimate,
        );
        row.context_length = context_length;
        if !ranks.is_empty() {
            row.footprint_bytes = ranks.iter().map(|rank| rank.footprint_bytes).sum();
            row.ranks = ranks;
        }
        data.push(row);
    }
    Json(WorkerList {
        object: "list",
        data,
    })
}

fn rank_rows(ranks: &[Rank]) -> Vec<RankRow> {
    ranks
        .iter()
        .map(|rank| RankRow {
            rank: rank.rank,
            host: rank.host.clone(),
            pid: rank.pid,
            footprint_bytes: rank.footprint_bytes(),
        })
        .collect()
}

fn row(
    model: &str,
    kind: ModelKind,
    snapshot: Option<&EntrySnapshot>,
    now: Instant,
    (stats, stats_error): (Option<WorkerStats>, Option<String>),
    estimate_bytes: Option<u64>,
) -> WorkerRow {
    let phase = snapshot.map_or(Phase::NotRunning, |snapshot| snapshot.phase);
    let stop_reason = match phase {
        Phase::Stopping(reason) => Some(reason.name().to_owned()),
        _ => None,
    };
    let seconds_since = |at: Instant| now.saturating_duration_since(at).as_secs_f64();
    let pid = snapshot.and_then(|snapshot| snapshot.pid);
    WorkerRow {
        model: model.to_owned(),
        kind,
        state: phase.name(),
        stop_reason,
        pid,
        leases: snapshot.map_or(0, |snapshot| snapshot.leases),
        pinned: snapshot.is_some_and(|snapshot| snapshot.pinned),
        restarts: snapshot.map_or(0, |snapshot| snapshot.restarts),
        state_secs: snapshot
            .and_then(|snapshot| snapshot.since)
            .map(seconds_since),
        uptime_secs: snapshot
            .filter(|snapshot| snapshot.phase == Phase::Ready)
            .and_then(|snapshot| snapshot.since)
            .map(seconds_since),
        idle_secs: snapshot
            .and_then(|snapshot| snapshot.last_used)
            .map(seconds_since),
        footprint_bytes: pid.and_then(|pid| process_footprint(pid).ok()),
        ranks: Vec::new(),
        estimate_bytes,
        last_exit: snapshot
            .and_then(|snapshot| snapshot.last_exit.as_ref())
            .map(ToString::to_string),
        context_length: None,
        stats,
        stats_error,
    }
}
