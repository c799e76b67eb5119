//! `acquire` under the pool's lock, admission included: a ready model is leased at once; a model
//! that needs a worker is admitted only when its estimate fits under the ceiling beside what the
//! other workers hold now (a starting one at its estimate, a stopping one until it is reaped).
//!
//! Admission is a transition like any other, so it is the only way a worker starts, two
//! admissions can never count on the same free memory, and a request for a ready model never
//! waits on another model's admission, start or stop. When room must be made, idle workers move
//! to `Stopping` in the same transition and the caller stops them; the model is admitted on a
//! later look, once they have been reaped, so an evicted worker is always gone before the new one
//! is spawned.

use std::time::Instant;

use super::machine::{Limits, PoolState};
use super::state::{EntryState, ExitInfo, StopReason, Worker};
use crate::memory::{Admission, format_bytes};

/// Why a model may not start now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "it needs about {}, workers hold {} of the {} ceiling, and no idle worker can be stopped to make room",
        format_bytes(*.needed), format_bytes(*.used), format_bytes(*.ceiling)
    )]
    NoRoom {
        needed: u64,
        used: u64,
        ceiling: u64,
    },
    #[error("{loaded} models are loaded (max_loaded_models is {max}) and none of them is idle")]
    TooManyLoaded { loaded: usize, max: usize },
}

impl Refusal {
    /// Whether room may still appear: not for a model bigger than the whole ceiling.
    pub fn may_pass_later(&self) -> bool {
        match self {
            Refusal::NoRoom {
                needed, ceiling, ..
            } => needed <= ceiling,
            Refusal::TooManyLoaded { .. } => true,
        }
    }
}

/// What `acquire` must do next, decided under the lock.
#[derive(Debug)]
pub(super) enum AcquireStep<H> {
    /// A lease was counted on this worker; the caller wraps it in a `Lease`.
    Leased(Worker<H>),
    /// The model is starting (`starting`) or stopping: ask again after the next change.
    Wait { starting: bool },
    /// Admitted: the caller launches `generation` with this share of the budget, then waits.
    Launch { generation: u64, memory_limit: u64 },
    /// These idle workers are now `Stopping` to make room: the caller stops them and asks
    /// again after the next change.
    Evict(Vec<(String, Worker<H>)>),
    /// No room now, and no idle worker to stop for it.
    NoRoom(Refusal),
    /// The model is in its crash-loop backoff until `retry_at`.
    Backoff {
        exit: ExitInfo,
        streak: u32,
        retry_at: Instant,
    },
    /// The start this caller waited on failed.
    StartFailed { exit: ExitInfo, retry_at: Instant },
}

/// What `PoolState::reserve` decided.
pub(super) enum ReserveStep<H> {
    /// The bytes are held.
    Held,
    /// These idle workers are now `Stopping` to make room: the caller stops them and asks
    /// again.
    Evict(Vec<(String, Worker<H>)>),
    NoRoom(Refusal),
}

/// One live or starting worker's share of the budget, as measured now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerUsage {
    pub model: String,
    /// `None` while starting: the model counts at its estimate.
    pub pid: Option<u32>,
    pub bytes: u64,
}

impl<H: Clone> PoolState<H> {
    /// Leases `model`'s ready worker, or says how to get one. `estimate` is what the model
    /// would need, `footprint` measures a live worker, and `waited_on_start` says the caller
    /// already waited on a start of this model (whose failure it then reports, rather than
    /// starting again).
    pub fn acquire(
        &mut self,
        model: &str,
        now: Instant,
        estimate: u64,
        footprint: &dyn Fn(u32) -> u64,
        waited_on_start: bool,
    ) -> AcquireStep<H> {
        // A model seen for the first time gets its entry when it starts, not before: looking
        // changes nothing.
        let Some(entry) = self.entries.get_mut(model) else {
            return self.admit(model, estimate, footprint, now);
        };
        match &mut entry.state {
            EntryState::Ready {
                worker,
                leases,
                last_used,
                ..
            } => {
                *leases += 1;
                *last_used = now;
                let worker = worker.clone();
                self.changed();
                return AcquireStep::Leased(worker);
            }
            EntryState::Starting { .. } => return AcquireStep::Wait { starting: true },
            EntryState::Stopping { .. } => return AcquireStep::Wait { starting: false },
            EntryState::Failed { exit, retry_at } if waited_on_start => {
                return AcquireStep::StartFailed {
                    exit: exit.clone(),
                    retry_at: *retry_at,
                };
            }
            EntryState::Failed { exit, retry_at } if *retry_at > now => {
                return AcquireStep::Backoff {
                    exit: exit.clone(),
                    streak: entry.streak,
                    retry_at: *retry_at,
                };
            }
            EntryState::Failed { .. } | EntryState::NotRunning => {}
        }
        self.admit(model, estimate, footprint, now)
    }

    /// Every live or starting worker and what it holds now.
    pub fn usage(&self, footprint: &dyn Fn(u32) -> u64) -> Vec<WorkerUsage> {
        self.entries
            .iter()
            .filter_map(|(model, entry)| {
                let (pid, bytes) = match &entry.state {
                    EntryState::Starting { estimate, .. } => (None, *estimate),
                    EntryState::Ready { worker, .. } => (Some(worker.pid), footprint(worker.pid)),
                    EntryState::Stopping { pid, .. } => (Some(*pid), footprint(*pid)),
                    EntryState::NotRunning | EntryState::Failed { .. } => return None,
                };
                Some(WorkerUsage {
                    model: model.clone(),
                    pid,
                    bytes,
                })
            })
            .collect()
    }

    /// Every worker's usage, and the budget held in all: theirs and the reservations'.
    fn held(&self, footprint: &dyn Fn(u32) -> u64) -> (Vec<WorkerUsage>, u64) {
        let usage = self.usage(footprint);
        let used = usage.iter().map(|worker| worker.bytes).sum::<u64>() + self.reserved;
        (usage, used)
    }

    /// Idle, unpinned workers with what each holds, least recently used first.
    pub fn idle_lru(&self, usage: &[WorkerUsage]) -> Vec<(String, u64)> {
        self.idle_candidates()
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

    /// Holds `bytes` for a process the pool does not run, or names the idle workers to stop
    /// first, or refuses.
    pub fn reserve(
        &mut self,
        bytes: u64,
        footprint: &dyn Fn(u32) -> u64,
        now: Instant,
    ) -> ReserveStep<H> {
        let (usage, used) = self.held(footprint);
        let ceiling = self.limits.budget.ceiling;
        let no_room = ReserveStep::NoRoom(Refusal::NoRoom {
            needed: bytes,
            used,
            ceiling,
        });
        let plan = self.limits.budget.plan_admission(
            bytes,
            used,
            &self.idle_lru(&usage),
            usage.len(),
            None,
        );
        let Admission::Admit { evict } = plan else {
            return no_room;
        };
        if evict.is_empty() {
            self.reserved += bytes;
            self.changed();
            return ReserveStep::Held;
        }
        let victims: Vec<_> = evict
            .into_iter()
            .filter_map(|victim| {
                let worker = self.begin_stop(&victim, StopReason::Evicted, now)?;
                Some((victim, worker))
            })
            .collect();
        // None of them could stop after all: nothing would free the room.
        if victims.is_empty() {
            return no_room;
        }
        ReserveStep::Evict(victims)
    }

    /// NotRunning, or Failed past its backoff: start now, make room first, or refuse.
    fn admit(
        &mut self,
        model: &str,
        estimate: u64,
        footprint: &dyn Fn(u32) -> u64,
        now: Instant,
    ) -> AcquireStep<H> {
        let (usage, used) = self.held(footprint);
        let Limits {
            budget,
            max_loaded_models,
        } = self.limits;
        let plan = budget.plan_admission(
            estimate,
            used,
            &self.idle_lru(&usage),
            usage.len(),
            max_loaded_models,
        );
        match plan {
            // Over the hard watermark nothing loads, even what would fit under the ceiling.
            Admission::Admit { evict } if evict.is_empty() && used > budget.hard => {
                AcquireStep::NoRoom(Refusal::NoRoom {
                    needed: estimate,
                    used,
                    ceiling: budget.ceiling,
                })
            }
            Admission::Admit { evict } if evict.is_empty() => AcquireStep::Launch {
                generation: self.enter_starting(model, estimate, now),
                memory_limit: budget.ceiling.saturating_sub(used),
            },
            Admission::Admit { evict } => AcquireStep::Evict(
                evict
                    .into_iter()
                    .filter_map(|victim| {
                        let worker = self.begin_stop(&victim, StopReason::Evicted, now)?;
                        Some((victim, worker))
                    })
                    .collect(),
            ),
            Admission::Refuse {
                needed,
                used,
                ceiling,
            } => AcquireStep::NoRoom(Refusal::NoRoom {
                needed,
                used,
                ceiling,
            }),
            Admission::TooManyLoaded { loaded, max } => {
                AcquireStep::NoRoom(Refusal::TooManyLoaded { loaded, max })
            }
        }
    }
}
