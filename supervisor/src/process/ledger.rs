//! What stops did: one record per stopped worker, whatever stopped it (eviction, idleness, an
//! operator, the shutdown), kept for the admin API and logs, with running totals per reason; each
//! record also feeds the Prometheus families.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::RankEnd;
use super::stop::StopStep;
use crate::memory::{format_bytes, system_memory};
use crate::metrics::Metrics;
use crate::pool::StopReason;

/// How many recent evictions the admin API shows.
const RECENT: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopRecord {
    pub model: String,
    pub pid: u32,
    pub reason: StopReason,
    /// Whether `Shutdown` was enough or signals were needed.
    pub step: StopStep,
    /// The worker's footprint when the stop was decided.
    pub freed_bytes: u64,
    /// From the decision to the reaped process.
    pub duration: Duration,
    pub available_before: u64,
    pub available_after: u64,
    /// A group's ranks other than 0, each as it ended on its host.
    pub ranks: Vec<RankStopped>,
}

/// How a rank of a stopped group ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankStopped {
    pub rank: usize,
    pub host: String,
    pub pid: u32,
    /// Its footprint when the stop was decided (as last reported, for a rank elsewhere).
    pub freed_bytes: u64,
    /// Its end, `None` while unknown when the stop ended.
    pub end: Option<RankEnd>,
}

/// What is measured when a stop is decided; `finish` completes the record once the process is
/// reaped.
pub struct StopStarted {
    decided: Instant,
    available_before: u64,
}

impl StopStarted {
    pub fn now() -> Self {
        Self {
            decided: Instant::now(),
            available_before: system_memory().available,
        }
    }

    pub fn finish(
        self,
        model: &str,
        pid: u32,
        reason: StopReason,
        step: StopStep,
        freed_bytes: u64,
        ranks: Vec<RankStopped>,
    ) -> StopRecord {
        StopRecord {
            model: model.to_owned(),
            pid,
            reason,
            step,
            freed_bytes,
            duration: self.decided.elapsed(),
            available_before: self.available_before,
            available_after: system_memory().available,
            ranks,
        }
    }
}

impl StopRecord {
    pub fn log(&self) {
        tracing::info!(
            model = %self.model,
            pid = self.pid,
            reason = ?self.reason,
            step = ?self.step,
            freed = %format_bytes(self.freed_bytes),
            duration_ms = self.duration.as_millis() as u64,
            available_before = %format_bytes(self.available_before),
            available_after = %format_bytes(self.available_after),
            "worker stopped"
        );
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StopTotals {
    pub count: u64,
    pub freed_bytes: u64,
    pub duration: Duration,
}

#[derive(Debug)]
pub struct Ledger {
    recent: VecDeque<StopRecord>,
    totals: BTreeMap<&'static str, StopTotals>,
    /// Every record feeds the Prometheus families too, whichever path stopped the worker.
    metrics: Arc<Metrics>,
}

impl Ledger {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            recent: VecDeque::new(),
            totals: BTreeMap::new(),
            metrics,
        }
    }

    pub fn record(&mut self, record: StopRecord) {
        let reason = record.reason.name();
        self.metrics
            .record_eviction(reason, record.freed_bytes, record.duration);
        let totals = self.totals.entry(reason).or_default();
        totals.count += 1;
        totals.freed_bytes += record.freed_bytes;
        totals.duration += record.duration;
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(record);
    }

    /// Oldest first.
    pub fn recent(&self) -> impl Iterator<Item = &StopRecord> {
        self.recent.iter()
    }

    /// By reason name (`evicted`, `idle`, ...).
    pub fn totals(&self) -> &BTreeMap<&'static str, StopTotals> {
        &self.totals
    }
}
