//! `GET /metrics`: the recorded families, plus those read from the pool and the memory manager
//! at scrape time (each model's state, each worker's footprint, restarts), in the OpenMetrics
//! text format, which Prometheus asks for first and parses as its own text format.
//!
//! The scraped families are built fresh for every scrape, so a worker that is gone leaves no
//! stale series behind.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use corral_ipc::PrefixCacheStats;

use super::{Metrics, ModelLabels};
use crate::eviction::{MemoryManager, WorkerUsage};
use crate::pool::{EntrySnapshot, Phase, Pool};
use crate::process::ProcessLauncher;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every state `corral_worker_state` reports, named as `/admin/workers` names them.
const STATES: [&str; 5] = ["not_running", "starting", "ready", "stopping", "failed"];

#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct StateLabels {
    model: String,
    state: &'static str,
}

pub struct Scrape {
    pub metrics: Arc<Metrics>,
    pub pool: Pool<ProcessLauncher>,
    pub models: Arc<crate::registry::Registry>,
    pub memory: Arc<MemoryManager<ProcessLauncher>>,
}

pub fn router(scrape: Arc<Scrape>) -> Router {
    Router::new()
        .route("/metrics", get(show))
        .with_state(scrape)
}

async fn show(State(scrape): State<Arc<Scrape>>) -> Response {
    let models: Vec<String> = scrape
        .models
        .entries()
        .map(|entry| entry.id.clone())
        .collect();
    let mut workers = workers(&models, &scrape.pool.snapshot(), &scrape.memory.usage());
    let mut prefix_stats = Vec::new();
    for model in &models {
        if let Some(worker) = scrape.pool.ready_worker(model)
            && let Ok(stats) = worker.handle.stats().await
            && let Some(prefix) = stats.prefix_cache
        {
            prefix_stats.push((model.clone(), prefix));
        }
    }
    register_prefix_cache(&mut workers, &prefix_stats);
    match scrape.metrics.encode(&workers) {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot encode the metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// The families read at scrape time, for every registered model.
fn workers(models: &[String], snapshot: &[EntrySnapshot], usage: &[WorkerUsage]) -> Registry {
    let states = Family::<StateLabels, Gauge>::default();
    let footprints = Family::<ModelLabels, Gauge<u64, AtomicU64>>::default();
    let restarts = Family::<ModelLabels, Counter>::default();
    for model in models {
        let entry = snapshot.iter().find(|entry| &entry.model == model);
        let current = entry.map_or(Phase::NotRunning, |entry| entry.phase).name();
        for state in STATES {
            let labels = StateLabels {
                model: model.clone(),
                state,
            };
            states
                .get_or_create(&labels)
                .set(i64::from(state == current));
        }
        let labels = ModelLabels {
            model: model.clone(),
        };
        restarts
            .get_or_create(&labels)
            .inc_by(entry.map_or(0, |entry| entry.restarts));
        if let Some(worker) = usage.iter().find(|worker| &worker.model == model) {
            footprints.get_or_create(&labels).set(worker.bytes);
        }
    }
    let mut registry = Registry::default();
    registry.register(
        "corral_worker_state",
        "1 for the state each model's worker is in (not_running, starting, ready, stopping, failed), 0 for the others",
        states,
    );
    registry.register(
        "corral_worker_footprint_bytes",
        "Each live worker's process footprint (RSS on Linux, phys_footprint on macOS); a starting model at its estimate",
        footprints,
    );
    registry.register(
        "corral_worker_restarts",
        "Unexpected worker exits and failed starts, by model",
        restarts,
    );
    registry
}

type PrefixCounter = (&'static str, &'static str, fn(&PrefixCacheStats) -> u64);

/// The prefix cache counters, as the running worker of each model reports them (they start
/// again from zero with a new worker, which Prometheus reads as a counter reset).
const PREFIX_COUNTERS: [PrefixCounter; 10] = [
    (
        "corral_prefix_cache_hit_blocks",
        "Prompt blocks restored from the prefix cache",
        |s| s.hit_blocks,
    ),
    (
        "corral_prefix_cache_miss_blocks",
        "Whole prompt blocks that had to be prefilled",
        |s| s.miss_blocks,
    ),
    (
        "corral_prefix_cache_hit_tokens",
        "Prompt tokens restored from the prefix cache",
        |s| s.hit_tokens,
    ),
    (
        "corral_prefix_cache_miss_tokens",
        "Prompt tokens prefilled",
        |s| s.miss_tokens,
    ),
    (
        "corral_prefix_cache_ram_evictions",
        "Blocks evicted from the RAM tier",
        |s| s.ram_evictions,
    ),
    (
        "corral_prefix_cache_saves_enqueued",
        "Blocks queued for the SSD writer",
        |s| s.saves_enqueued,
    ),
    (
        "corral_prefix_cache_saves_persisted",
        "Blocks written and renamed into place on SSD",
        |s| s.saves_persisted,
    ),
    (
        "corral_prefix_cache_save_drops",
        "Blocks not saved: the writer's queue stayed full or the disk was full",
        |s| s.save_drops,
    ),
    (
        "corral_prefix_cache_disk_evictions",
        "Block files removed for the directory's size limit",
        |s| s.disk_evictions,
    ),
    (
        "corral_prefix_cache_load_errors",
        "Block files that failed their checks on load and were deleted",
        |s| s.load_errors,
    ),
];

type PrefixGauge = (&'static str, &'static str, fn(&PrefixCacheStats) -> u64);

const PREFIX_GAUGES: [PrefixGauge; 3] = [
    (
        "corral_prefix_cache_ram_bytes",
        "Bytes of blocks in the RAM tier",
        |s| s.ram_bytes,
    ),
    (
        "corral_prefix_cache_disk_bytes",
        "Bytes of block files on SSD",
        |s| s.disk_bytes,
    ),
    (
        "corral_prefix_cache_disk_files",
        "Block files on SSD",
        |s| s.disk_files,
    ),
];

fn register_prefix_cache(registry: &mut Registry, stats: &[(String, PrefixCacheStats)]) {
    let labels = |model: &String| ModelLabels {
        model: model.clone(),
    };
    for (name, help, read) in PREFIX_COUNTERS {
        let family = Family::<ModelLabels, Counter>::default();
        for (model, stats) in stats {
            family.get_or_create(&labels(model)).inc_by(read(stats));
        }
        registry.register(name, help, family);
    }
    for (name, help, read) in PREFIX_GAUGES {
        let family = Family::<ModelLabels, Gauge<u64, AtomicU64>>::default();
        for (model, stats) in stats {
            family.get_or_create(&labels(model)).set(read(stats));
        }
        registry.register(name, help, family);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(model: &str, phase: Phase, restarts: u64) -> EntrySnapshot {
        EntrySnapshot {
            model: model.to_owned(),
            phase,
            pid: None,
            since: None,
            leases: 0,
            pinned: false,
            restarts,
            retry_at: None,
            last_used: None,
            last_exit: None,
        }
    }

    #[test]
    fn every_model_reports_one_state_its_restarts_and_a_live_workers_footprint() {
        let models = ["llama".to_owned(), "qwen3".to_owned()];
        let snapshots = [snapshot("llama", Phase::Ready, 2)];
        let usage = [WorkerUsage {
            model: "llama".to_owned(),
            pid: Some(42),
            bytes: 1 << 30,
        }];
        let text = Metrics::new()
            .encode(&workers(&models, &snapshots, &usage))
            .unwrap();
        for line in [
            r#"corral_worker_state{model="llama",state="ready"} 1"#,
            r#"corral_worker_state{model="llama",state="not_running"} 0"#,
            r#"corral_worker_state{model="qwen3",state="not_running"} 1"#,
            r#"corral_worker_state{model="qwen3",state="ready"} 0"#,
            r#"corral_worker_restarts_total{model="llama"} 2"#,
            r#"corral_worker_restarts_total{model="qwen3"} 0"#,
            r#"corral_worker_footprint_bytes{model="llama"} 1073741824"#,
        ] {
            assert!(text.lines().any(|got| got == line), "{line} in\n{text}");
        }
        assert!(!text.contains(r#"corral_worker_footprint_bytes{model="qwen3"}"#));
        assert!(text.ends_with("# EOF\n"));
    }
}
