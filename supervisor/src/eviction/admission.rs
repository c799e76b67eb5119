//! Admission: before a model's worker starts, its estimate must fit under the ceiling beside
//! what the other workers hold now; idle workers are stopped, least recently used first, to make
//! room, and each is reaped before the new worker is spawned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{MemoryManager, WorkerUsage};
use crate::memory::{Admission, format_bytes};
use crate::pool::{Launcher, Phase, StopReason};
use crate::process::WorkerClient;

/// Another request may lease a worker between the plan and its stop; plan again this often.
const PLAN_ATTEMPTS: usize = 3;
/// How often to look again while a worker is stopping.
const STOP_POLL: Duration = Duration::from_millis(20);
/// How often a request that found no room plans again while it waits.
const ROOM_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error(
        "not enough memory to load {model}: it needs about {}, workers hold {} of the {} ceiling, and no idle worker can be stopped to make room",
        format_bytes(*.needed), format_bytes(*.used), format_bytes(*.ceiling)
    )]
    NoRoom {
        model: String,
        needed: u64,
        used: u64,
        ceiling: u64,
    },
    #[error(
        "cannot load {model}: {loaded} models are loaded (max_loaded_models is {max}) and none of them is idle"
    )]
    TooManyLoaded {
        model: String,
        loaded: usize,
        max: usize,
    },
}

impl AdmissionError {
    /// Whether room may still appear: not for a model bigger than the whole ceiling.
    fn may_pass_later(&self) -> bool {
        match self {
            AdmissionError::NoRoom {
                needed, ceiling, ..
            } => needed <= ceiling,
            AdmissionError::TooManyLoaded { .. } => true,
        }
    }
}

impl<L: Launcher<Handle = Arc<WorkerClient>>> MemoryManager<L> {
    /// Makes sure `model` is starting or running when it returns `Ok`, stopping idle workers
    /// first if its estimate needs their memory. A model already running, starting, or failed
    /// and in its backoff is left to `Pool::acquire`. Without room, it plans again until the
    /// admission wait runs out: busy workers go idle, and idle ones can then be stopped.
    pub async fn admit(&self, model: &str) -> Result<(), AdmissionError> {
        let deadline = Instant::now() + self.config.memory.admission_wait;
        let mut waited = false;
        loop {
            match self.admit_once(model).await {
                Err(error) if error.may_pass_later() && Instant::now() + ROOM_POLL <= deadline => {
                    if !waited {
                        tracing::info!(model, %error, "waiting for room to load");
                        waited = true;
                    }
                    tokio::time::sleep(ROOM_POLL).await;
                }
                outcome => return outcome,
            }
        }
    }

    /// One admission attempt, in turn with every other one.
    async fn admit_once(&self, model: &str) -> Result<(), AdmissionError> {
        let _turn = self.gate.lock().await;
        if !self.needs_start(model).await {
            return Ok(());
        }
        // A stop in progress is memory on its way out: plan once it is gone.
        self.wait_for_stops().await;
        let estimate = self.estimate(model);
        let mut last_refusal = None;
        for _ in 0..PLAN_ATTEMPTS {
            let usage = self.usage();
            let used: u64 = usage.iter().map(|worker| worker.bytes).sum();
            let plan = self.budget.plan_admission(
                estimate,
                used,
                &self.idle_lru(&usage),
                usage.len(),
                self.config.memory.max_loaded_models,
            );
            let evict = match plan {
                Admission::Admit { evict } => evict,
                Admission::Refuse {
                    needed,
                    used,
                    ceiling,
                } => {
                    return Err(AdmissionError::NoRoom {
                        model: model.to_owned(),
                        needed,
                        used,
                        ceiling,
                    });
                }
                Admission::TooManyLoaded { loaded, max } => {
                    return Err(AdmissionError::TooManyLoaded {
                        model: model.to_owned(),
                        loaded,
                        max,
                    });
                }
            };
            let mut freed = 0;
            let mut all_stopped = true;
            for victim in &evict {
                match self.evict(victim, StopReason::Evicted).await {
                    Some(record) => freed += record.freed_bytes,
                    None => all_stopped = false,
                }
            }
            let held_by_others = used.saturating_sub(freed);
            // Over the hard watermark nothing loads, even what would fit under the ceiling.
            if all_stopped && held_by_others > self.budget.hard {
                return Err(AdmissionError::NoRoom {
                    model: model.to_owned(),
                    needed: estimate,
                    used: held_by_others,
                    ceiling: self.budget.ceiling,
                });
            }
            if all_stopped {
                self.limits
                    .set(model, self.budget.ceiling.saturating_sub(held_by_others));
                self.pool.start(model);
                return Ok(());
            }
            last_refusal = Some(AdmissionError::NoRoom {
                model: model.to_owned(),
                needed: estimate,
                used: used.saturating_sub(freed),
                ceiling: self.budget.ceiling,
            });
        }
        Err(last_refusal.unwrap_or(AdmissionError::NoRoom {
            model: model.to_owned(),
            needed: estimate,
            used: 0,
            ceiling: self.budget.ceiling,
        }))
    }

    /// Whether `model` needs a new worker; waits out a stop of its own worker first.
    async fn needs_start(&self, model: &str) -> bool {
        loop {
            match self.pool.phase(model) {
                Phase::Ready | Phase::Starting => return false,
                Phase::NotRunning => return true,
                Phase::Failed => {
                    let now = Instant::now();
                    return self.pool.snapshot().iter().any(|entry| {
                        entry.model == model && entry.retry_at.is_none_or(|at| at <= now)
                    });
                }
                Phase::Stopping(_) => tokio::time::sleep(STOP_POLL).await,
            }
        }
    }

    /// Waits until no worker is stopping, up to the longest a stop can take (two grace periods
    /// and the kill).
    async fn wait_for_stops(&self) {
        let deadline = Instant::now() + self.config.worker_stop_grace * 3;
        while Instant::now() < deadline
            && self
                .pool
                .snapshot()
                .iter()
                .any(|entry| matches!(entry.phase, Phase::Stopping(_)))
        {
            tokio::time::sleep(STOP_POLL).await;
        }
    }

    /// Idle, unpinned workers with what each holds, least recently used first.
    pub(super) fn idle_lru(&self, usage: &[WorkerUsage]) -> Vec<(String, u64)> {
        self.pool
            .idle_candidates()
            .into_iter()
            .map(|candidate| {
                let bytes = usage
                    .iter()
                    .find(|worker| worker.pid == Some(candidate.pid))
                    .map_or(0, |worker| worker.bytes);
                (candidate.model, bytes)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::AdmissionError;

    fn no_room(needed: u64, ceiling: u64) -> AdmissionError {
        AdmissionError::NoRoom {
            model: "m".to_owned(),
            needed,
            used: ceiling,
            ceiling,
        }
    }

    #[test]
    fn only_a_model_bigger_than_the_whole_ceiling_is_refused_without_waiting() {
        assert!(no_room(100, 100).may_pass_later());
        assert!(!no_room(101, 100).may_pass_later());
        let too_many = AdmissionError::TooManyLoaded {
            model: "m".to_owned(),
            loaded: 2,
            max: 2,
        };
        assert!(too_many.may_pass_later());
    }
}
