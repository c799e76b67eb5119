//! The memory manager: keeps the sum of worker footprints under the budget by ending idle
//! worker processes, and admits a model only when its estimate fits.
//!
//! Every figure is a process footprint sampled when the decision is made (Linux RSS, macOS
//! `phys_footprint`), so a stopped worker's memory is known to be gone once it is reaped; a
//! model still starting counts at its estimate. Workers are only ever stopped through
//! `Pool::begin_stop`, which refuses a leased worker, so no policy here can stop one that serves.

mod admission;
mod enforcer;
pub mod ledger;
mod operator;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub use admission::AdmissionError;
pub use ledger::{EvictionRecord, EvictionTotals, Ledger, StopStarted};
pub use operator::OperatorError;

use crate::config::Config;
use crate::memory::{Budget, estimate_model_bytes, process_footprint, system_memory};
use crate::metrics::Metrics;
use crate::pool::{Launcher, Phase, Pool, StopReason};
use crate::process::{WorkerClient, WorkerMemoryLimits, stop_worker};
use crate::registry::Registry;

/// One live worker's share of the budget, as measured now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerUsage {
    pub model: String,
    /// `None` while starting: the model counts at its estimate.
    pub pid: Option<u32>,
    pub bytes: u64,
}

pub struct MemoryManager<L: Launcher<Handle = Arc<WorkerClient>>> {
    pool: Pool<L>,
    registry: Arc<Registry>,
    config: Arc<Config>,
    budget: Budget,
    /// Admissions run one at a time, so two loads never both count on the same free memory.
    gate: tokio::sync::Mutex<()>,
    estimates: Mutex<HashMap<String, u64>>,
    limits: WorkerMemoryLimits,
    ledger: Mutex<Ledger>,
}

impl<L: Launcher<Handle = Arc<WorkerClient>>> MemoryManager<L> {
    pub fn new(
        pool: Pool<L>,
        registry: Arc<Registry>,
        config: Arc<Config>,
        limits: WorkerMemoryLimits,
        metrics: Arc<Metrics>,
    ) -> Self {
        let total = system_memory().total;
        let ceiling = config.memory.ceiling.map_or_else(
            || Budget::for_total(total).ceiling,
            |amount| amount.resolve(total),
        );
        let budget = Budget::new(
            ceiling,
            config.memory.soft_watermark,
            config.memory.hard_watermark,
        );
        Self {
            pool,
            registry,
            config,
            budget,
            gate: tokio::sync::Mutex::new(()),
            estimates: Mutex::new(HashMap::new()),
            limits,
            ledger: Mutex::new(Ledger::new(metrics)),
        }
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }

    pub fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // Plain counters and a list: consistent under any panic point.
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every live or starting worker and what it holds now.
    pub fn usage(&self) -> Vec<WorkerUsage> {
        self.pool
            .snapshot()
            .into_iter()
            .filter_map(|entry| match (entry.phase, entry.pid) {
                (Phase::Starting, _) => Some(WorkerUsage {
                    bytes: self.estimate(&entry.model),
                    model: entry.model,
                    pid: None,
                }),
                (_, Some(pid)) => Some(WorkerUsage {
                    model: entry.model,
                    pid: Some(pid),
                    bytes: footprint(pid),
                }),
                _ => None,
            })
            .collect()
    }

    /// What `model` is expected to need once loaded; 0 (logged) when its files cannot be read,
    /// in which case its worker will fail to load anyway.
    fn estimate(&self, model: &str) -> u64 {
        let mut estimates = self
            .estimates
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(&bytes) = estimates.get(model) {
            return bytes;
        }
        let Some(entry) = self.registry.get(model) else {
            return 0;
        };
        match estimate_model_bytes(&entry.dir) {
            Ok(estimate) => {
                estimates.insert(model.to_owned(), estimate.total());
                estimate.total()
            }
            Err(error) => {
                tracing::warn!(model, %error, "cannot estimate the model's memory");
                0
            }
        }
    }

    /// Stops `model`'s worker if it is idle (and, for eviction or idleness, unpinned), waits
    /// until it is reaped, and records what that freed. `None` when the pool refused: the
    /// worker is leased, not ready, or pinned.
    pub async fn evict(&self, model: &str, reason: StopReason) -> Option<EvictionRecord> {
        let started = StopStarted::now();
        let worker = self.pool.begin_stop(model, reason)?;
        let footprint_before = footprint(worker.pid);
        let stopped = stop_worker(&worker.handle, self.config.worker_stop_grace).await;
        Some(self.remember(started.finish(
            model,
            worker.pid,
            reason,
            stopped.step,
            footprint_before,
        )))
    }

    /// Logs and counts a finished stop.
    fn remember(&self, record: EvictionRecord) -> EvictionRecord {
        record.log();
        self.ledger().record(record.clone());
        record
    }

    /// Starts `model` (a pinned one) through admission and waits until it is ready, holding no
    /// lease afterwards. Failures are logged; the next request or crash tries again.
    pub async fn ensure_running(&self, model: &str) {
        if let Err(error) = self.admit(model).await {
            tracing::warn!(model, %error, "cannot start a pinned model");
            return;
        }
        if let Err(error) = self.pool.acquire(model).await {
            tracing::warn!(model, %error, "cannot start a pinned model");
        }
    }

    fn idle_timeout(&self, model: &str) -> Option<Duration> {
        self.config.idle_timeout(model)
    }
}

/// A process's footprint now; 0 for one that has just exited (its memory is gone).
fn footprint(pid: u32) -> u64 {
    process_footprint(pid).unwrap_or_else(|error| {
        tracing::debug!(pid, %error, "no footprint");
        0
    })
}
