//! The enforcer: stops idle workers whose idle timeout has run out, and idle workers least
//! recently used first while the sum of footprints is over the soft watermark (every idle one
//! over the hard watermark, where admission also refuses loads).
//!
//! It sleeps until the next idle deadline, the next footprint sample or a change in the pool,
//! whichever comes first: footprints grow while workers compute without any pool event, so they
//! are sampled on a clock (often while anything starts or stops or memory is high, seldom
//! otherwise), but a worker going idle or a start finishing wakes it at once. Every stop goes
//! through `Pool::stop`, which refuses a leased worker, so no policy here can stop one that
//! serves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::pool::{Phase, Pool, Processes, StopReason};

/// While workers start or stop, or memory is over the soft watermark.
const FAST_SAMPLE: Duration = Duration::from_millis(250);
/// When nothing happens.
const SLOW_SAMPLE: Duration = Duration::from_secs(2);

pub struct Enforcer<P: Processes> {
    pool: Pool<P>,
    config: Arc<Config>,
}

impl<P: Processes> Enforcer<P> {
    pub fn new(pool: Pool<P>, config: Arc<Config>) -> Self {
        Self { pool, config }
    }

    /// Runs until the server ends.
    pub async fn run(self) {
        let mut changes = self.pool.changes();
        loop {
            let next = self.check().await;
            tokio::select! {
                () = tokio::time::sleep(next) => {}
                _ = changes.changed() => {}
            }
        }
    }

    /// One pass; returns how long it may sleep before the next.
    pub async fn check(&self) -> Duration {
        let mut next_idle_deadline = None::<Duration>;
        let now = Instant::now();
        for candidate in self.pool.idle_candidates() {
            let Some(timeout) = self.config.idle_timeout(&candidate.model) else {
                continue;
            };
            let idle = now.saturating_duration_since(candidate.last_used);
            match timeout.checked_sub(idle) {
                Some(left) if !left.is_zero() => {
                    next_idle_deadline = Some(next_idle_deadline.map_or(left, |d| d.min(left)));
                }
                _ => {
                    self.pool.stop(&candidate.model, StopReason::Idle).await;
                }
            }
        }
        let usage = self.pool.usage();
        let used: u64 = usage.iter().map(|worker| worker.bytes).sum();
        let budget = self.pool.limits().budget;
        let plan = budget.plan_pressure(used, &self.pool.idle_lru(&usage));
        for model in &plan.stop {
            self.pool.stop(model, StopReason::Evicted).await;
        }
        let changing = self
            .pool
            .snapshot()
            .iter()
            .any(|entry| matches!(entry.phase, Phase::Starting | Phase::Stopping(_)));
        let sample = if changing || used > budget.soft {
            FAST_SAMPLE
        } else {
            SLOW_SAMPLE
        };
        next_idle_deadline.map_or(sample, |deadline| deadline.min(sample))
    }
}
