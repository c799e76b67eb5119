//! The pool's state machine: every model's entry, and every transition between entry states as
//! one method of [`PoolState`].
//!
//! Nothing here awaits, spawns or reads the clock: the caller holds the pool's one
//! `std::sync::Mutex` around each call and passes `now`. That keeps each transition atomic (no
//! lease can be taken between "looks idle" and "is stopping") and lets the tests drive the
//! machine through any schedule they like, with a clock they control.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::launcher::LaunchedWorker;
use super::state::{
    Entry, EntryState, ExitInfo, ExitStatus, Phase, STABLE_AFTER, StopReason, Waiters, Worker,
    backoff,
};

/// Locks the pool. A poisoned lock is taken anyway: every transition leaves its entry in a valid
/// state before anything in it could panic, and a lease dropped while a panic unwinds must still
/// give its count back rather than panic a second time.
pub(super) fn lock<H>(state: &Mutex<PoolState<H>>) -> MutexGuard<'_, PoolState<H>> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
pub(super) struct PoolState<H> {
    entries: BTreeMap<String, Entry<H>>,
    /// The last generation handed out; every start gets the next one.
    generation: u64,
}

/// What `acquire` must do next, decided under the lock.
#[derive(Debug)]
pub(super) enum AcquireStep<H> {
    /// A lease was counted on this worker; the caller wraps it in a `Lease`.
    Leased(Worker<H>),
    /// A start or stop is under way; wait for `changed()` and ask again.
    Wait(watch::Receiver<()>),
    /// The caller must launch generation `generation`, then wait like `Wait`.
    Launch {
        generation: u64,
        done: watch::Receiver<()>,
    },
    /// The model is in its crash-loop backoff.
    CrashLooping {
        last_exit: ExitInfo,
        attempts: u32,
        retry_after: Duration,
    },
}

/// What an exit reported by the reaper did to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitOutcome {
    /// A stopping worker was reaped; the model is `NotRunning`.
    Stopped,
    /// A ready worker died. `backoff` is `None` when it had run long enough to count as stable,
    /// so the next request starts it at once.
    Crashed { backoff: Option<Duration> },
    /// The model is starting; the exit is kept in case it is the pid the launch returns.
    DuringStart,
    /// Not this model's current worker: a duplicate or late report, ignored.
    Stale,
}

/// A worker eviction may stop: ready, unleased, not pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleCandidate {
    pub model: String,
    pub pid: u32,
    pub last_used: Instant,
}

/// One entry as the admin API and metrics see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySnapshot {
    pub model: String,
    pub phase: Phase,
    pub pid: Option<u32>,
    /// When the current start, readiness or stop began.
    pub since: Option<Instant>,
    pub leases: u32,
    pub pinned: bool,
    pub restarts: u64,
    /// When a `Failed` model may start again.
    pub retry_at: Option<Instant>,
    /// When a ready worker last finished or began a request.
    pub last_used: Option<Instant>,
    pub last_exit: Option<ExitInfo>,
}

impl<H> PoolState<H> {
    pub fn new() -> Self {
        Self {
            entries: BTreeMap::new(),
            generation: 0,
        }
    }

    /// The launch of `generation` returned a worker: Starting -> Ready, unless the reaper has
    /// already reported its pid dead (then Failed). Returns whether it became ready.
    pub fn launched(
        &mut self,
        model: &str,
        generation: u64,
        launched: LaunchedWorker<H>,
        now: Instant,
    ) -> bool {
        let Some(entry) = self.entries.get_mut(model) else {
            return false;
        };
        let EntryState::Starting {
            generation: starting,
            attempts,
            early_exit,
            ..
        } = &entry.state
        else {
            return false;
        };
        if *starting != generation {
            return false;
        }
        let attempts = *attempts;
        if let Some((pid, status)) = *early_exit
            && pid == launched.pid
        {
            entry.restarts += 1;
            let exit = ExitInfo::Exited { pid, status };
            entry.last_exit = Some(exit.clone());
            entry.state = failed(exit, attempts.saturating_add(1), now);
            return false;
        }
        entry.state = EntryState::Ready {
            worker: Worker {
                pid: launched.pid,
                generation,
                handle: launched.handle,
            },
            leases: 0,
            last_used: now,
            ready_since: now,
            attempts,
        };
        true
    }

    /// The launch of `generation` failed: Starting -> Failed, with the next backoff.
    pub fn launch_failed(&mut self, model: &str, generation: u64, message: String, now: Instant) {
        let Some(entry) = self.entries.get_mut(model) else {
            return;
        };
        if let EntryState::Starting {
            generation: starting,
            attempts,
            ..
        } = &entry.state
            && *starting == generation
        {
            entry.restarts += 1;
            let exit = ExitInfo::LaunchFailed { message };
            entry.last_exit = Some(exit.clone());
            entry.state = failed(exit, attempts.saturating_add(1), now);
        }
    }

    /// A lease ended. Only the generation it was taken on is touched: a lease that outlived its
    /// worker finds another generation (or none) and changes nothing.
    pub fn release(&mut self, model: &str, generation: u64, now: Instant) {
        let Some(Entry {
            state:
                EntryState::Ready {
                    worker,
                    leases,
                    last_used,
                    ..
                },
            ..
        }) = self.entries.get_mut(model)
        else {
            return;
        };
        if worker.generation == generation {
            *leases = leases.saturating_sub(1);
            *last_used = now;
        }
    }

    /// The reaper saw `pid` end. Stopping -> NotRunning; Ready -> NotRunning (it had been
    /// stable) or Failed (it died soon after a start); anything else leaves the entry as it is.
    pub fn on_exit(
        &mut self,
        model: &str,
        pid: u32,
        status: ExitStatus,
        now: Instant,
    ) -> ExitOutcome {
        let Some(entry) = self.entries.get_mut(model) else {
            return ExitOutcome::Stale;
        };
        match &mut entry.state {
            EntryState::Starting { early_exit, .. } => {
                *early_exit = Some((pid, status));
                ExitOutcome::DuringStart
            }
            EntryState::Stopping { pid: stopping, .. } if *stopping == pid => {
                entry.last_exit = Some(ExitInfo::Exited { pid, status });
                entry.state = EntryState::NotRunning;
                ExitOutcome::Stopped
            }
            EntryState::Ready {
                worker,
                ready_since,
                attempts,
                ..
            } if worker.pid == pid => {
                entry.restarts += 1;
                entry.last_exit = Some(ExitInfo::Exited { pid, status });
                if now.saturating_duration_since(*ready_since) >= STABLE_AFTER {
                    entry.state = EntryState::NotRunning;
                    return ExitOutcome::Crashed { backoff: None };
                }
                let attempts = attempts.saturating_add(1);
                entry.state = failed(ExitInfo::Exited { pid, status }, attempts, now);
                ExitOutcome::Crashed {
                    backoff: Some(backoff(attempts)),
                }
            }
            _ => ExitOutcome::Stale,
        }
    }

    pub fn set_pinned(&mut self, model: &str, pinned: bool) {
        self.entries.entry(model.to_owned()).or_default().pinned = pinned;
    }

    /// Ready, unleased, unpinned workers, least recently used first.
    pub fn idle_candidates(&self) -> Vec<IdleCandidate> {
        let mut idle: Vec<IdleCandidate> = self
            .entries
            .iter()
            .filter(|(_, entry)| !entry.pinned)
            .filter_map(|(model, entry)| match &entry.state {
                EntryState::Ready {
                    worker,
                    leases: 0,
                    last_used,
                    ..
                } => Some(IdleCandidate {
                    model: model.clone(),
                    pid: worker.pid,
                    last_used: *last_used,
                }),
                _ => None,
            })
            .collect();
        idle.sort_by_key(|candidate| candidate.last_used);
        idle
    }

    pub fn phase(&self, model: &str) -> Phase {
        self.entries
            .get(model)
            .map_or(Phase::NotRunning, |entry| entry.state.phase())
    }

    pub fn snapshot(&self) -> Vec<EntrySnapshot> {
        self.entries
            .iter()
            .map(|(model, entry)| EntrySnapshot {
                model: model.clone(),
                phase: entry.state.phase(),
                pid: entry.state.pid(),
                since: entry.state.since(),
                leases: match &entry.state {
                    EntryState::Ready { leases, .. } => *leases,
                    _ => 0,
                },
                pinned: entry.pinned,
                restarts: entry.restarts,
                retry_at: match &entry.state {
                    EntryState::Failed { retry_at, .. } => Some(*retry_at),
                    _ => None,
                },
                last_used: match &entry.state {
                    EntryState::Ready { last_used, .. } => Some(*last_used),
                    _ => None,
                },
                last_exit: entry.last_exit.clone(),
            })
            .collect()
    }

    /// The entry's current state, for the tests' invariant checks.
    #[cfg(test)]
    pub fn state(&self, model: &str) -> Option<&EntryState<H>> {
        self.entries.get(model).map(|entry| &entry.state)
    }
}

impl<H: Clone> PoolState<H> {
    /// The ready worker of `model`, without a lease: for looking at it (stats), never for
    /// sending it work.
    pub fn ready_worker(&self, model: &str) -> Option<Worker<H>> {
        match &self.entries.get(model)?.state {
            EntryState::Ready { worker, .. } => Some(worker.clone()),
            _ => None,
        }
    }

    /// Leases a ready worker, or says how to get one: NotRunning and an expired Failed start a
    /// new generation; Starting and Stopping are waited on; Failed in backoff refuses.
    pub fn acquire(&mut self, model: &str, now: Instant) -> AcquireStep<H> {
        let entry = self.entries.entry(model.to_owned()).or_default();
        let attempts = match &mut entry.state {
            EntryState::NotRunning => 0,
            EntryState::Starting { waiters, .. } | EntryState::Stopping { waiters, .. } => {
                return AcquireStep::Wait(waiters.subscribe());
            }
            EntryState::Ready {
                worker,
                leases,
                last_used,
                ..
            } => {
                *leases += 1;
                *last_used = now;
                return AcquireStep::Leased(worker.clone());
            }
            EntryState::Failed {
                exit,
                attempts,
                retry_at,
            } if *retry_at > now => {
                return AcquireStep::CrashLooping {
                    last_exit: exit.clone(),
                    attempts: *attempts,
                    retry_after: *retry_at - now,
                };
            }
            EntryState::Failed { attempts, .. } => *attempts,
        };
        let (generation, done) = self.enter_starting(model, attempts, now);
        AcquireStep::Launch { generation, done }
    }

    /// NotRunning, or Failed past its backoff -> Starting, without a lease: the generation to
    /// launch, or `None` when the model is in any other state (it needs no start, or may not
    /// start yet).
    pub fn start(&mut self, model: &str, now: Instant) -> Option<u64> {
        let entry = self.entries.entry(model.to_owned()).or_default();
        let attempts = match &entry.state {
            EntryState::NotRunning => 0,
            EntryState::Failed {
                attempts, retry_at, ..
            } if *retry_at <= now => *attempts,
            _ => return None,
        };
        Some(self.enter_starting(model, attempts, now).0)
    }

    fn enter_starting(
        &mut self,
        model: &str,
        attempts: u32,
        now: Instant,
    ) -> (u64, watch::Receiver<()>) {
        self.generation += 1;
        let waiters = Waiters::default();
        let done = waiters.subscribe();
        self.entries.entry(model.to_owned()).or_default().state = EntryState::Starting {
            generation: self.generation,
            started_at: now,
            attempts,
            waiters,
            early_exit: None,
        };
        (self.generation, done)
    }

    /// Ready, leased or not -> Stopping(Killed), and the worker to end: an operator's kill,
    /// which fails the requests in flight. `None` when no ready worker exists.
    pub fn begin_kill(&mut self, model: &str, now: Instant) -> Option<Worker<H>> {
        let entry = self.entries.get_mut(model)?;
        let EntryState::Ready { worker, .. } = &entry.state else {
            return None;
        };
        let worker = worker.clone();
        entry.state = EntryState::Stopping {
            pid: worker.pid,
            reason: StopReason::Killed,
            since: now,
            waiters: Waiters::default(),
        };
        Some(worker)
    }

    /// Ready with zero leases -> Stopping, and the worker to stop; `None` for a leased, busy,
    /// absent or (for eviction and idleness) pinned worker. The caller sends `Shutdown` and
    /// escalates; the reaper's `on_exit` completes the stop.
    pub fn begin_stop(
        &mut self,
        model: &str,
        reason: StopReason,
        now: Instant,
    ) -> Option<Worker<H>> {
        let entry = self.entries.get_mut(model)?;
        if entry.pinned && !reason.applies_to_pinned() {
            return None;
        }
        let EntryState::Ready {
            worker, leases: 0, ..
        } = &entry.state
        else {
            return None;
        };
        let worker = worker.clone();
        entry.state = EntryState::Stopping {
            pid: worker.pid,
            reason,
            since: now,
            waiters: Waiters::default(),
        };
        Some(worker)
    }
}

fn failed<H>(exit: ExitInfo, attempts: u32, now: Instant) -> EntryState<H> {
    EntryState::Failed {
        exit,
        attempts,
        retry_at: now + backoff(attempts),
    }
}
