//! The enforcer: a loop that samples every worker's footprint, stops idle workers whose idle
//! timeout has run out, and stops idle workers least recently used first while the total is over
//! the soft watermark (every idle one over the hard watermark, where loads are also refused).
//! It looks often while anything starts or stops or memory is high, and seldom otherwise.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::MemoryManager;
use crate::pool::{Launcher, Phase, StopReason};
use crate::process::WorkerClient;

/// While workers start or stop, or memory is over the soft watermark.
const FAST_POLL: Duration = Duration::from_millis(250);
/// When nothing happens.
const SLOW_POLL: Duration = Duration::from_secs(2);

impl<L: Launcher<Handle = Arc<WorkerClient>>> MemoryManager<L> {
    /// Runs until the server ends.
    pub async fn enforce(self: Arc<Self>) {
        loop {
            let next = self.check().await;
            tokio::time::sleep(next).await;
        }
    }

    /// One pass; returns how long to wait before the next.
    pub async fn check(&self) -> Duration {
        let now = Instant::now();
        for candidate in self.pool.idle_candidates() {
            if let Some(timeout) = self.idle_timeout(&candidate.model)
                && now.saturating_duration_since(candidate.last_used) >= timeout
            {
                self.evict(&candidate.model, StopReason::Idle).await;
            }
        }
        let usage = self.usage();
        let used: u64 = usage.iter().map(|worker| worker.bytes).sum();
        let plan = self.budget.plan_pressure(used, &self.idle_lru(&usage));
        self.ledger().refuse_loads = plan.refuse_loads;
        for model in &plan.stop {
            self.evict(model, StopReason::Evicted).await;
        }
        let changing = self
            .pool
            .snapshot()
            .iter()
            .any(|entry| matches!(entry.phase, Phase::Starting | Phase::Stopping(_)));
        if changing || used > self.budget.soft {
            FAST_POLL
        } else {
            SLOW_POLL
        }
    }
}
