//! The worker pool: one entry per model, at most one worker process per model, and the leases
//! requests hold on ready workers.
//!
//! All state sits in one `PoolState` behind one `std::sync::Mutex`, taken for one transition at a
//! time and never across an await. Waiting (for a start, for a stop) happens outside the lock on
//! a watch channel the state itself owns, so leaving the state is what wakes the waiters. Process
//! handling is the [`Launcher`]'s business; the pool only hears of processes through `launch`
//! results and the reaper's [`Pool::on_exit`].

mod launcher;
mod lease;
mod machine;
mod state;

#[cfg(test)]
mod acquire_tests;
#[cfg(test)]
mod async_schedule_tests;
#[cfg(test)]
mod machine_tests;
#[cfg(test)]
mod schedule_tests;
#[cfg(test)]
mod sim;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use launcher::{LaunchError, LaunchedWorker, Launcher};
pub use lease::Lease;
pub use machine::{EntrySnapshot, ExitOutcome, IdleCandidate};
pub use state::{
    BACKOFF_BASE, BACKOFF_CAP, ExitInfo, ExitStatus, Phase, STABLE_AFTER, StopReason, Worker,
};

use machine::{AcquireStep, PoolState, lock};

#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    #[error(
        "model {model} is crash-looping ({attempts} failed starts in a row; last: {last_exit}); retry in {:.1} s",
        .retry_after.as_secs_f64()
    )]
    CrashLooping {
        model: String,
        attempts: u32,
        last_exit: ExitInfo,
        retry_after: Duration,
    },
}

pub struct Pool<L: Launcher> {
    state: Arc<Mutex<PoolState<L::Handle>>>,
    launcher: Arc<L>,
}

impl<L: Launcher> Clone for Pool<L> {
    fn clone(&self) -> Self {
        Self {
            state: Arc::clone(&self.state),
            launcher: Arc::clone(&self.launcher),
        }
    }
}

impl<L: Launcher> Pool<L> {
    pub fn new(launcher: L) -> Self {
        Self {
            state: Arc::new(Mutex::new(PoolState::new())),
            launcher: Arc::new(launcher),
        }
    }

    /// A lease on `model`'s ready worker, starting it if none runs. Concurrent callers share one
    /// start; a caller that finds the model stopping waits for the stop, then starts it anew.
    /// Dropping the future stops waiting but never cancels a start.
    pub async fn acquire(&self, model: &str) -> Result<Lease<L::Handle>, AcquireError> {
        loop {
            let step = lock(&self.state).acquire(model, Instant::now());
            let mut changed = match step {
                AcquireStep::Leased(worker) => {
                    return Ok(Lease::new(Arc::clone(&self.state), model, worker));
                }
                AcquireStep::Wait(changed) => changed,
                AcquireStep::Launch { generation, done } => {
                    self.spawn_launch(model, generation);
                    done
                }
                AcquireStep::CrashLooping {
                    last_exit,
                    attempts,
                    retry_after,
                } => {
                    return Err(AcquireError::CrashLooping {
                        model: model.to_owned(),
                        attempts,
                        last_exit,
                        retry_after,
                    });
                }
            };
            // An error only means the sender is gone, which is the signal itself: the entry
            // left the state we waited on, so look again.
            let _ = changed.changed().await;
        }
    }

    /// The reaper saw `pid`, a worker of `model`, end with `status`.
    pub fn on_exit(&self, model: &str, pid: u32, status: ExitStatus) -> ExitOutcome {
        let outcome = lock(&self.state).on_exit(model, pid, status, Instant::now());
        tracing::debug!(model, pid, %status, ?outcome, "worker exit");
        outcome
    }

    /// Moves `model` to Stopping if its worker is ready and unleased (and, for eviction or
    /// idleness, not pinned), and returns the worker to stop. Never stops a leased worker.
    pub fn begin_stop(&self, model: &str, reason: StopReason) -> Option<Worker<L::Handle>> {
        lock(&self.state).begin_stop(model, reason, Instant::now())
    }

    /// Moves `model`'s ready worker to Stopping even while it serves (an operator's kill) and
    /// returns it; the caller signals it and the reaper completes the stop.
    pub fn begin_kill(&self, model: &str) -> Option<Worker<L::Handle>> {
        lock(&self.state).begin_kill(model, Instant::now())
    }

    /// Pinned models are never evicted or stopped for idleness.
    pub fn set_pinned(&self, model: &str, pinned: bool) {
        lock(&self.state).set_pinned(model, pinned);
    }

    /// Workers eviction may stop, least recently used first.
    pub fn idle_candidates(&self) -> Vec<IdleCandidate> {
        lock(&self.state).idle_candidates()
    }

    pub fn snapshot(&self) -> Vec<EntrySnapshot> {
        lock(&self.state).snapshot()
    }

    /// Starts `model`'s worker without leasing it, if it is not running (or failed and past its
    /// backoff); returns at once. `acquire` then waits for the start like any other.
    pub fn start(&self, model: &str) -> bool {
        let generation = lock(&self.state).start(model, Instant::now());
        if let Some(generation) = generation {
            self.spawn_launch(model, generation);
        }
        generation.is_some()
    }

    /// The state `model` is in now.
    pub fn phase(&self, model: &str) -> Phase {
        lock(&self.state).phase(model)
    }

    /// `model`'s worker if it is ready, without taking a lease.
    pub fn ready_worker(&self, model: &str) -> Option<Worker<L::Handle>> {
        lock(&self.state).ready_worker(model)
    }

    /// Runs the launch in its own task, so that no waiter's cancellation can strand the entry
    /// in Starting; the guard records a failure if the task dies without an answer.
    fn spawn_launch(&self, model: &str, generation: u64) {
        let guard = StartGuard {
            state: Arc::clone(&self.state),
            model: model.to_owned(),
            generation,
            answered: false,
        };
        let launcher = Arc::clone(&self.launcher);
        tokio::spawn(async move {
            let result = launcher.launch(&guard.model).await;
            guard.answer(result);
        });
    }
}

/// Owns one launch's outcome: `answer` applies it, and dropping the guard unanswered (the
/// launcher panicked, or the runtime shut down) fails the start instead of leaving it waiting.
struct StartGuard<H> {
    state: Arc<Mutex<PoolState<H>>>,
    model: String,
    generation: u64,
    answered: bool,
}

impl<H> StartGuard<H> {
    fn answer(mut self, result: Result<LaunchedWorker<H>, LaunchError>) {
        self.answered = true;
        let now = Instant::now();
        let mut state = lock(&self.state);
        match result {
            Ok(worker) => {
                let pid = worker.pid;
                if !state.launched(&self.model, self.generation, worker, now) {
                    tracing::warn!(model = %self.model, pid, "worker died before it was ready");
                }
            }
            Err(err) => {
                tracing::warn!(model = %self.model, %err, "worker failed to start");
                state.launch_failed(&self.model, self.generation, err.to_string(), now);
            }
        }
    }
}

impl<H> Drop for StartGuard<H> {
    fn drop(&mut self) {
        if !self.answered {
            let message = "the launch task ended without an answer".to_owned();
            lock(&self.state).launch_failed(&self.model, self.generation, message, Instant::now());
        }
    }
}
