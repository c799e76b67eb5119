//! The pool's state machine: every model's entry, and every transition between entry states as
//! one method of [`PoolState`].
//!
//! Nothing here awaits, spawns or reads the clock: the caller holds the pool's one
//! `std::sync::Mutex` around each call and passes `now`. That keeps each transition atomic (no
//! lease can be taken between "looks idle" and "is stopping", no two admissions count on the same
//! free memory) and lets the tests drive the machine through any schedule they like, with a
//! clock they control. Every transition bumps one pool-wide version (`changes`), so a task that
//! waits for the pool to move on subscribes under the lock and cannot miss the change.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use nix::sys::signal::Signal;
use tokio::sync::watch;

use super::processes::LaunchedWorker;
use super::state::{
    CRASH_LOOP_STREAK, Entry, EntryState, ExitInfo, ExitStatus, Phase, StopReason, Worker, backoff,
};
use crate::memory::Budget;

/// Locks the pool. A poisoned lock is taken anyway: every transition leaves its entry in a valid
/// state before anything in it could panic, and a lease dropped while a panic unwinds must still
/// give its count back rather than panic a second time.
pub(super) fn lock<H>(state: &Mutex<PoolState<H>>) -> MutexGuard<'_, PoolState<H>> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What admission (`admission.rs`) checks a start against; the pool holds it from its creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub budget: Budget,
    pub max_loaded_models: Option<usize>,
}

#[derive(Debug)]
pub(super) struct PoolState<H> {
    pub(super) entries: BTreeMap<String, Entry<H>>,
    /// The last generation handed out; every start gets the next one.
    generation: u64,
    pub(super) limits: Limits,
    /// Bytes held for processes the pool does not run: ranks this host runs for another
    /// host's worker group (`Pool::reserve`).
    pub(super) reserved: u64,
    /// Bumped by every transition; see [`PoolState::subscribe`].
    changes: watch::Sender<u64>,
}

/// What an exit reported by the reaper did to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitOutcome {
    /// A stopping worker was reaped; the model is `NotRunning`.
    Stopped,
    /// A ready worker died. `backoff` is `None` when the next start may come at once.
    Crashed {
        backoff: Option<std::time::Duration>,
    },
    /// The model is starting; the exit is kept in case it is the pid the launch returns.
    DuringStart,
    /// Not this model's current worker: a duplicate or late report, ignored.
    Stale,
}

impl ExitOutcome {
    /// The exit's cause as metrics label it: an exit the pool was waiting for is `stopped`,
    /// whatever signal it took; any other names its status, so crashes by signal and by exit
    /// code stay apart.
    pub fn cause(self, status: ExitStatus) -> String {
        match (self, status) {
            (ExitOutcome::Stopped, _) => "stopped".to_owned(),
            (_, ExitStatus::Code(code)) => format!("exit_code_{code}"),
            (_, ExitStatus::Signal(signal)) => format!("signal_{signal}"),
        }
    }
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
    pub fn new(limits: Limits) -> Self {
        Self {
            entries: BTreeMap::new(),
            generation: 0,
            limits,
            reserved: 0,
            changes: watch::channel(0).0,
        }
    }

    /// A receiver whose `changed()` resolves at the next transition. Taken under the lock, after
    /// the look at the state it will wait on, so no transition in between can be missed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The pool-wide version, for the tests' check that every change is announced.
    #[cfg(test)]
    pub fn version(&self) -> u64 {
        *self.changes.borrow()
    }

    pub(super) fn changed(&self) {
        self.changes
            .send_modify(|version| *version = version.wrapping_add(1));
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
            early_exit,
            ..
        } = &entry.state
        else {
            return false;
        };
        if *starting != generation {
            return false;
        }
        let ready = match *early_exit {
            Some((pid, status)) if pid == launched.pid => {
                start_failed(entry, ExitInfo::Exited { pid, status }, now);
                false
            }
            _ => {
                entry.state = EntryState::Ready {
                    worker: Worker {
                        pid: launched.pid,
                        generation,
                        handle: launched.handle,
                    },
                    leases: 0,
                    last_used: now,
                    ready_since: now,
                    served: false,
                };
                true
            }
        };
        self.changed();
        ready
    }

    /// The launch of `generation` failed (`exit` is `LaunchFailed` or `Unservable`): Starting ->
    /// Failed.
    pub fn launch_failed(&mut self, model: &str, generation: u64, exit: ExitInfo, now: Instant) {
        let Some(entry) = self.entries.get_mut(model) else {
            return;
        };
        if let EntryState::Starting {
            generation: starting,
            ..
        } = &entry.state
            && *starting == generation
        {
            start_failed(entry, exit, now);
            self.changed();
        }
    }

    /// A lease ended; `completed` when its request ran to its end on this worker, which ends
    /// the model's failure streak. Only the generation it was taken on is touched: a lease that
    /// outlived its worker finds another generation (or none) and changes nothing.
    pub fn release(&mut self, model: &str, generation: u64, completed: bool, now: Instant) {
        let Some(entry) = self.entries.get_mut(model) else {
            return;
        };
        let EntryState::Ready {
            worker,
            leases,
            last_used,
            served,
            ..
        } = &mut entry.state
        else {
            return;
        };
        if worker.generation != generation {
            return;
        }
        *leases = leases.saturating_sub(1);
        *last_used = now;
        if completed {
            *served = true;
            entry.streak = 0;
        }
        self.changed();
    }

    /// The reaper saw `pid` end. Stopping -> NotRunning; Ready -> NotRunning, or Failed when the
    /// crash-loop rule says so; anything else leaves the entry as it is.
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
        let outcome = match &mut entry.state {
            EntryState::Starting { early_exit, .. } => {
                *early_exit = Some((pid, status));
                return ExitOutcome::DuringStart;
            }
            EntryState::Stopping { pid: stopping, .. } if *stopping == pid => {
                entry.last_exit = Some(ExitInfo::Exited { pid, status });
                entry.state = EntryState::NotRunning;
                ExitOutcome::Stopped
            }
            EntryState::Ready { worker, served, .. } if worker.pid == pid => {
                let served = *served;
                ready_worker_died(entry, pid, status, served, now)
            }
            _ => return ExitOutcome::Stale,
        };
        self.changed();
        outcome
    }

    pub fn set_pinned(&mut self, model: &str, pinned: bool) {
        self.entries.entry(model.to_owned()).or_default().pinned = pinned;
        self.changed();
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

    /// NotRunning, or Failed past its backoff -> Starting: the new generation.
    pub(super) fn enter_starting(&mut self, model: &str, estimate: u64, now: Instant) -> u64 {
        self.generation += 1;
        self.entries.entry(model.to_owned()).or_default().state = EntryState::Starting {
            generation: self.generation,
            started_at: now,
            estimate,
            early_exit: None,
        };
        self.changed();
        self.generation
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

    /// Ready, leased or not -> Stopping(Killed), and the worker to end: an operator's kill (or
    /// the end of a drain), which fails the requests in flight. `None` when no ready worker
    /// exists.
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
        };
        self.changed();
        Some(worker)
    }

    /// Ready with zero leases -> Stopping, and the worker to stop; `None` for a leased, busy,
    /// absent or (for eviction and idleness) pinned worker. The caller runs the stop; the
    /// reaper's `on_exit` completes it.
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
        };
        self.changed();
        Some(worker)
    }
}

/// A start failed before `Ready`: one more failure in the streak, unless the model can never
/// start, which no backoff helps (its waiters are told at once, and no retry comes to count).
fn start_failed<H>(entry: &mut Entry<H>, exit: ExitInfo, now: Instant) {
    entry.restarts += 1;
    let retry_at = if matches!(exit, ExitInfo::Unservable { .. }) {
        now
    } else {
        entry.streak = entry.streak.saturating_add(1);
        now + backoff(entry.streak)
    };
    entry.last_exit = Some(exit.clone());
    entry.state = EntryState::Failed { exit, retry_at };
}

/// A ready worker died: the crash-loop rule of `state.rs` decides whether the next start waits.
fn ready_worker_died<H>(
    entry: &mut Entry<H>,
    pid: u32,
    status: ExitStatus,
    served: bool,
    now: Instant,
) -> ExitOutcome {
    entry.restarts += 1;
    let exit = ExitInfo::Exited { pid, status };
    entry.last_exit = Some(exit.clone());
    let killed_from_outside = status == ExitStatus::Signal(Signal::SIGKILL as i32);
    // A worker that finished a request has already reset the streak.
    if !served && !killed_from_outside {
        entry.streak = entry.streak.saturating_add(1);
    }
    if killed_from_outside || entry.streak < CRASH_LOOP_STREAK {
        entry.state = EntryState::NotRunning;
        return ExitOutcome::Crashed { backoff: None };
    }
    let wait = backoff(entry.streak);
    entry.state = EntryState::Failed {
        exit,
        retry_at: now + wait,
    };
    ExitOutcome::Crashed {
        backoff: Some(wait),
    }
}
