//! `GET /admin/memory`: the budget, what each worker holds now, the system's memory, and what
//! evictions have done.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::Admin;
use super::control::StoppedRank;
use crate::memory::system_memory;

#[derive(Debug, Serialize)]
pub struct MemoryView {
    pub ceiling_bytes: u64,
    pub soft_watermark_bytes: u64,
    pub hard_watermark_bytes: u64,
    /// The sum of worker footprints (a starting model at its estimate).
    pub used_bytes: u64,
    pub refusing_loads: bool,
    pub system_total_bytes: u64,
    pub system_available_bytes: u64,
    pub workers: Vec<WorkerMemory>,
    pub evictions: BTreeMap<&'static str, StopTotalsView>,
    /// Oldest first.
    pub recent_evictions: Vec<EvictionView>,
}

#[derive(Debug, Serialize)]
pub struct WorkerMemory {
    pub model: String,
    pub pid: Option<u32>,
    pub bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct StopTotalsView {
    pub count: u64,
    pub freed_bytes: u64,
    pub duration_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct EvictionView {
    pub model: String,
    pub pid: u32,
    pub reason: &'static str,
    /// `graceful`, `terminated` or `killed`.
    pub step: String,
    pub freed_bytes: u64,
    pub duration_ms: f64,
    pub available_before_bytes: u64,
    pub available_after_bytes: u64,
    /// A group's other ranks, each as it ended on its host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<StoppedRank>,
}

pub async fn show(State(admin): State<Arc<Admin>>) -> Json<MemoryView> {
    let budget = admin.pool.limits().budget;
    let usage = admin.pool.usage();
    let used: u64 = usage.iter().map(|worker| worker.bytes).sum();
    let system = system_memory();
    let ledger = admin.pool.processes().ledger();
    Json(MemoryView {
        ceiling_bytes: budget.ceiling,
        soft_watermark_bytes: budget.soft,
        hard_watermark_bytes: budget.hard,
        used_bytes: used,
        // Admission's own rule: over the hard watermark nothing loads.
        refusing_loads: used > budget.hard,
        system_total_bytes: system.total,
        system_available_bytes: system.available,
        workers: usage
            .into_iter()
            .map(|worker| WorkerMemory {
                model: worker.model,
                pid: worker.pid,
                bytes: worker.bytes,
            })
            .collect(),
        evictions: ledger
            .totals()
            .iter()
            .map(|(reason, totals)| {
                (
                    *reason,
                    StopTotalsView {
                        count: totals.count,
                        freed_bytes: totals.freed_bytes,
                        duration_ms: totals.duration.as_secs_f64() * 1e3,
                    },
                )
            })
            .collect(),
        recent_evictions: ledger
            .recent()
            .map(|record| EvictionView {
                model: record.model.clone(),
                pid: record.pid,
                reason: record.reason.name(),
                step: format!("{:?}", record.step).to_lowercase(),
                freed_bytes: record.freed_bytes,
                duration_ms: record.duration.as_secs_f64() * 1e3,
                available_before_bytes: record.available_before,
                available_after_bytes: record.available_after,
                ranks: record
                    .ranks
                    .iter()
                    .cloned()
                    .map(StoppedRank::from)
                    .collect(),
            })
            .collect(),
    })
}
