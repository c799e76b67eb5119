//! The worker pool: one entry per model, at most one worker process per model, the leases
//! requests hold on ready workers, and every start and stop of a worker.
//!
//! All state sits in one `PoolState` behind one `std::sync::Mutex`, taken for one transition at a
//! time and never across an await. Admission is one of those transitions (`admission.rs`), so no
//! worker starts without it. Waiting (for a start, a stop, room, a backoff) happens outside the
//! lock on the pool's change notification, subscribed under the lock. Processes are the
//! [`Processes`] implementation's business; the pool hears of them through `launch` and `stop`
//! results and the reaper's [`Pool::on_exit`].

mod admission;
mod lease;
mod machine;
mod processes;
mod state;

#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::sync::watch;

pub use admission::{Refusal, WorkerUsage};
pub use lease::Lease;
pub use machine::{EntrySnapshot, ExitOutcome, IdleCandidate, Limits};
pub use processes::{LaunchError, LaunchedWorker, Processes, StopOrder};
pub use state::{ExitInfo, ExitStatus, Phase, StopReason, Worker};

use admission::{AcquireStep, ReserveStep};
use machine::{PoolState, lock};

#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    #[error("not enough memory to load {model}: {refusal}")]
    Refused { model: String, refusal: Refusal },
    #[error(
        "model {model} is crash-looping ({streak} failures in a row; last: {last_exit}); retry in {:.1} s",
        .retry_after.as_secs_f64()
    )]
    CrashLooping {
        model: String,
        streak: u32,
        last_exit: ExitInfo,
        retry_after: Duration,
    },
    #[error("model {model} could not start: {exit}")]
    StartFailed {
        model: String,
        exit: ExitInfo,
        /// Until the model's backoff ends (zero when the next start may come at once).
        retry_after: Duration,
    },
    /// The start waited on found that the model can never start; `reason` names its path.
    #[error("the model `{model}` cannot be served: {reason}")]
    Unservable { model: String, reason: String },
}

impl AcquireError {
    /// How long a client should wait before it tries again; `None` for a memory refusal or a
    /// model that can never start.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            AcquireError::Refused { .. } | AcquireError::Unservable { .. } => None,
            AcquireError::CrashLooping { retry_after, .. }
            | AcquireError::StartFailed { retry_after, .. } => Some(*retry_after),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StopError {
    #[error("model {model} has no running worker")]
    NotRunning { model: String },
    #[error("model {model} still had requests in flight after {} s", .after.as_secs_f64())]
    DrainTimeout { model: String, after: Duration },
}

/// Budget held by `Pool::reserve`, given back when dropped.
pub struct Reservation {
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

pub struct Pool<P: Processes> {
    state: Arc<Mutex<PoolState<P::Handle>>>,
    processes: Arc<P>,
}

impl<P: Processes> Clone for Pool<P> {
    fn clone(&self) -> Self {
        Self {
            state: Arc::clone(&self.state),
            processes: Arc::clone(&self.processes),
        }
    }
}

impl<P: Processes> Pool<P> {
    pub fn new(processes: P, limits: Limits) -> Self {
        Self {
            state: Arc::new(Mutex::new(PoolState::new(limits))),
            processes: Arc::new(processes),
        }
    }

    pub fn processes(&self) -> &P {
        &self.processes
    }

    pub fn limits(&self) -> Limits {
        lock(&self.state).limits
    }

    /// A lease on `model`'s ready worker, starting it through admission if none runs. Concurrent
    /// callers share one start; a caller that finds the model stopping waits for the stop, then
    /// starts it anew. Room that is missing, or a backoff, is waited for up to `wait`. Dropping
    /// the future stops waiting but never cancels a start or a stop.
    pub async fn acquire(
        &self,
        model: &str,
        wait: Duration,
    ) -> Result<Lease<P::Handle>, AcquireError> {
        let deadline = Instant::now() + wait;
        let estimate = self.processes.estimate(model);
        let footprint = |pid| self.processes.footprint(pid);
        let mut waited_on_start = false;
        let mut waiting_for_room = false;
        loop {
            let (step, mut changed) = {
                let mut state = lock(&self.state);
                let step =
                    state.acquire(model, Instant::now(), estimate, &footprint, waited_on_start);
                (step, state.subscribe())
            };
            match step {
                AcquireStep::Leased(worker) => {
                    return Ok(Lease::new(Arc::clone(&self.state), model, worker));
                }
                AcquireStep::Wait { starting } => {
                    waited_on_start |= starting;
                    let _ = changed.changed().await;
                }
                AcquireStep::Launch {
                    generation,
                    memory_limit,
                } => {
                    self.spawn_launch(model, generation, memory_limit);
                    waited_on_start = true;
                    let _ = changed.changed().await;
                }
                AcquireStep::Evict(victims) => self.make_room(victims, model).await,
                AcquireStep::NoRoom(refusal) => {
                    let refused = || AcquireError::Refused {
                        model: model.to_owned(),
                        refusal: refusal.clone(),
                    };
                    if !refusal.may_pass_later() {
                        return Err(refused());
                    }
                    if !waiting_for_room {
                        tracing::info!(model, %refusal, "waiting for room to load");
                        waiting_for_room = true;
                    }
                    if !changed_before(&mut changed, deadline).await {
                        return Err(refused());
                    }
                }
                AcquireStep::Backoff {
                    exit,
                    streak,
                    retry_at,
                } => {
                    if retry_at > deadline {
                        return Err(AcquireError::CrashLooping {
                            model: model.to_owned(),
                            streak,
                            last_exit: exit,
                            retry_after: retry_at.saturating_duration_since(Instant::now()),
                        });
                    }
                    tokio::time::sleep_until(retry_at.into()).await;
                }
                AcquireStep::StartFailed {
                    exit: ExitInfo::Unservable { reason },
                    ..
                } => {
                    return Err(AcquireError::Unservable {
                        model: model.to_owned(),
                        reason,
                    });
                }
                AcquireStep::StartFailed { exit, retry_at } => {
                    return Err(AcquireError::StartFailed {
                        model: model.to_owned(),
                        exit,
                        retry_after: retry_at.saturating_duration_since(Instant::now()),
                    });
                }
            }
        }
    }

    /// Holds `bytes` of the budget for a process the pool does not run (a rank this host runs
    /// for another host's worker group) until the reservation is dropped, first stopping idle
    /// workers as a load would; refused when even that leaves no room. Starts admitted
    /// meanwhile count it as held.
    pub async fn reserve(&self, bytes: u64) -> Result<Reservation, Refusal> {
        loop {
            let step = {
                let footprint = |pid| self.processes.footprint(pid);
                lock(&self.state).reserve(bytes, &footprint, Instant::now())
            };
            let victims = match step {
                ReserveStep::Held => break,
                ReserveStep::NoRoom(refusal) => return Err(refusal),
                ReserveStep::Evict(victims) => victims,
            };
            self.make_room(victims, "another host's rank").await;
        }
        let pool_state = Arc::clone(&self.state);
        Ok(Reservation {
            release: Some(Box::new(move || {
                let mut state = lock(&pool_state);
                state.reserved = state.reserved.saturating_sub(bytes);
                state.changed();
            })),
        })
    }

    /// Stops `model`'s worker gracefully if it is ready and idle (and, for eviction or
    /// idleness, unpinned), and returns once it has been reaped. `None` when the pool refused.
    pub async fn stop(&self, model: &str, reason: StopReason) -> Option<P::Stopped> {
        let worker = lock(&self.state).begin_stop(model, reason, Instant::now())?;
        Some(
            self.processes
                .stop(model, worker, StopOrder::Graceful(reason))
                .await,
        )
    }

    /// Waits up to `timeout` for `model`'s requests to end (new ones may still arrive and are
    /// waited for too), then stops the worker gracefully and waits for the reap.
    pub async fn unload(
        &self,
        model: &str,
        reason: StopReason,
        timeout: Duration,
    ) -> Result<P::Stopped, StopError> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut changed = match self.look_to_unload(model, reason)? {
                UnloadLook::Stop(worker) => {
                    let order = StopOrder::Graceful(reason);
                    return Ok(self.processes.stop(model, worker, order).await);
                }
                UnloadLook::Wait(changed) => changed,
            };
            if !changed_before(&mut changed, deadline).await {
                return Err(StopError::DrainTimeout {
                    model: model.to_owned(),
                    after: timeout,
                });
            }
        }
    }

    /// One look of `unload`, under the lock.
    fn look_to_unload(
        &self,
        model: &str,
        reason: StopReason,
    ) -> Result<UnloadLook<P::Handle>, StopError> {
        let mut state = lock(&self.state);
        if let Some(worker) = state.begin_stop(model, reason, Instant::now()) {
            return Ok(UnloadLook::Stop(worker));
        }
        if matches!(state.phase(model), Phase::NotRunning | Phase::Failed) {
            return Err(StopError::NotRunning {
                model: model.to_owned(),
            });
        }
        Ok(UnloadLook::Wait(state.subscribe()))
    }

    /// Sends `signal` to `model`'s worker now, whether or not it serves (its requests fail with
    /// its exit), and returns once it has been reaped.
    pub async fn kill(&self, model: &str, signal: Signal) -> Result<P::Stopped, StopError> {
        let worker = lock(&self.state)
            .begin_kill(model, Instant::now())
            .ok_or_else(|| StopError::NotRunning {
                model: model.to_owned(),
            })?;
        Ok(self
            .processes
            .stop(model, worker, StopOrder::Signal(signal))
            .await)
    }

    /// Stops every worker for the supervisor's exit: idle ones gracefully, busy ones (still
    /// leased after the drain) with SIGKILL; returns once all of them have been reaped.
    pub async fn stop_all(&self) {
        let models: Vec<String> = lock(&self.state).entries.keys().cloned().collect();
        let mut stops = Vec::new();
        for model in models {
            let now = Instant::now();
            let mut state = lock(&self.state);
            let (worker, order) =
                if let Some(worker) = state.begin_stop(&model, StopReason::Shutdown, now) {
                    (worker, StopOrder::Graceful(StopReason::Shutdown))
                } else if let Some(worker) = state.begin_kill(&model, now) {
                    tracing::warn!(
                        model,
                        pid = worker.pid,
                        "killing a worker that is still busy"
                    );
                    (worker, StopOrder::Signal(Signal::SIGKILL))
                } else {
                    continue;
                };
            drop(state);
            stops.push(self.spawn_stop(model, worker, order));
        }
        for stop in stops {
            let _ = stop.await;
        }
    }

    /// The reaper saw `pid`, a worker of `model`, end with `status`.
    pub fn on_exit(&self, model: &str, pid: u32, status: ExitStatus) -> ExitOutcome {
        let outcome = lock(&self.state).on_exit(model, pid, status, Instant::now());
        tracing::debug!(model, pid, %status, ?outcome, "worker exit");
        outcome
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

    /// Every live or starting worker and what it holds now (a starting one at its estimate).
    pub fn usage(&self) -> Vec<WorkerUsage> {
        lock(&self.state).usage(&|pid| self.processes.footprint(pid))
    }

    /// Idle, unpinned workers with what each holds in `usage`, least recently used first.
    pub fn idle_lru(&self, usage: &[WorkerUsage]) -> Vec<(String, u64)> {
        lock(&self.state).idle_lru(usage)
    }

    /// A receiver whose `changed()` resolves at the pool's next transition.
    pub fn changes(&self) -> watch::Receiver<u64> {
        lock(&self.state).subscribe()
    }

    /// The state `model` is in now.
    pub fn phase(&self, model: &str) -> Phase {
        lock(&self.state).phase(model)
    }

    /// `model`'s worker if it is ready, without taking a lease.
    pub fn ready_worker(&self, model: &str) -> Option<Worker<P::Handle>> {
        lock(&self.state).ready_worker(model)
    }

    /// Runs the launch in its own task, so that no waiter's cancellation can strand the entry
    /// in Starting; the guard records a failure if the task dies without an answer.
    fn spawn_launch(&self, model: &str, generation: u64, memory_limit: u64) {
        let guard = StartGuard {
            state: Arc::clone(&self.state),
            model: model.to_owned(),
            generation,
            answered: false,
        };
        let processes = Arc::clone(&self.processes);
        tokio::spawn(async move {
            let result = processes.launch(&guard.model, memory_limit).await;
            guard.answer(result);
        });
    }

    /// Runs a stop in its own task: the worker is `Stopping` already, and admission counts on
    /// its reap even if the request that decided it goes away.
    /// Stops `victims`, idle workers already `Stopping`, to make room for `room_for`, and
    /// returns once they are reaped and recorded, so that the caller can plan again.
    async fn make_room(&self, victims: Vec<(String, Worker<P::Handle>)>, room_for: &str) {
        let stops: Vec<_> = victims
            .into_iter()
            .map(|(victim, worker)| {
                tracing::info!(
                    room_for,
                    victim,
                    pid = worker.pid,
                    "stopping an idle worker to make room"
                );
                self.spawn_stop(victim, worker, StopOrder::Graceful(StopReason::Evicted))
            })
            .collect();
        for stop in stops {
            let _ = stop.await;
        }
    }

    fn spawn_stop(
        &self,
        model: String,
        worker: Worker<P::Handle>,
        order: StopOrder,
    ) -> tokio::task::JoinHandle<()> {
        let processes = Arc::clone(&self.processes);
        tokio::spawn(async move {
            processes.stop(&model, worker, order).await;
        })
    }
}

/// What `unload` found: the worker to stop now, or, while it still serves, the change to wait for.
enum UnloadLook<H> {
    Stop(Worker<H>),
    Wait(watch::Receiver<u64>),
}

/// Waits for the pool's next change until `deadline`; `false` when the deadline came first.
async fn changed_before(changed: &mut watch::Receiver<u64>, deadline: Instant) -> bool {
    tokio::time::timeout_at(deadline.into(), changed.changed())
        .await
        .is_ok()
}

/// Owns one launch's outcome: `answer` applies it, and dropping the guard unanswered (the
/// launch panicked, or the runtime shut down) fails the start instead of leaving it waiting.
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
            Err(LaunchError::Unservable { reason, .. }) => {
                let exit = ExitInfo::Unservable { reason };
                state.launch_failed(&self.model, self.generation, exit, now);
            }
            Err(err) => {
                tracing::warn!(model = %self.model, %err, "worker failed to start");
                let exit = ExitInfo::LaunchFailed {
                    message: err.to_string(),
                };
                state.launch_failed(&self.model, self.generation, exit, now);
            }
        }
    }
}

impl<H> Drop for StartGuard<H> {
    fn drop(&mut self) {
        if !self.answered {
            let exit = ExitInfo::LaunchFailed {
                message: "the launch task ended without an answer".to_owned(),
            };
            lock(&self.state).launch_failed(&self.model, self.generation, exit, Instant::now());
        }
    }
}
