//! The state of one model's entry in the pool, as the architecture draws it:
//!
//! ```text
//! NotRunning -> Starting -> Ready(pid, leases, last_used) -> Stopping(reason) -> NotRunning (reaped)
//!                   \-> Failed(exit, retry_at) -> Starting (once its backoff has passed)
//! ```
//!
//! These are plain values; every transition is one method on `PoolState` (`machine.rs`), called
//! under the pool's one lock. The lease count lives in `Ready` itself, so there is no state in
//! which a leased worker can look idle, and `Stopping` has no count at all: a worker is only
//! stopped once its count is zero.
//!
//! The crash-loop rule: an entry's `streak` counts its failures in a row. A start that fails
//! before `Ready` is one; so is a ready worker that dies by itself (an exit code, or any signal
//! but SIGKILL) before it has finished a single request. A finished request resets the streak.
//! A worker ended by SIGKILL from outside (an operator's `kill -9`, the OOM killer, jetsam) is
//! not the model's failure and leaves the streak as it was. Only from [`CRASH_LOOP_STREAK`]
//! failures on does the next start wait out a backoff; before that, and always after a ready
//! worker was killed, the next request starts a new worker at once. A start that failed because
//! the model can never start (`ExitInfo::Unservable`: its files cannot load) is no failure of
//! the streak either: no backoff helps it, and the registry, which now lists the model as
//! unservable, refuses it from then on.

use std::fmt;
use std::time::{Duration, Instant};

/// Failures in a row from which a model waits out a backoff before its next start.
pub const CRASH_LOOP_STREAK: u32 = 3;
/// The first backoff; each further failure in a row doubles it.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// The longest a crash-looping model waits before its next start.
pub const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// How long to wait before the next start after `streak` failures in a row: nothing below
/// [`CRASH_LOOP_STREAK`], then 1 s, 2 s, 4 s ... up to [`BACKOFF_CAP`].
pub fn backoff(streak: u32) -> Duration {
    let Some(over) = streak.checked_sub(CRASH_LOOP_STREAK) else {
        return Duration::ZERO;
    };
    BACKOFF_BASE
        .saturating_mul(1 << over.min(16))
        .min(BACKOFF_CAP)
}

/// Why a worker is being stopped; kept for logs, metrics and the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// Memory pressure: LRU eviction of an idle worker.
    Evicted,
    /// Its idle TTL ran out.
    Idle,
    /// The supervisor is shutting down.
    Shutdown,
    /// Ops kill (`corral kill MODEL`).
    Killed,
    /// `corral unload MODEL`.
    Unload,
}

impl StopReason {
    /// The name logs, metrics and the admin API use.
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Evicted => "evicted",
            StopReason::Idle => "idle",
            StopReason::Shutdown => "shutdown",
            StopReason::Killed => "killed",
            StopReason::Unload => "unload",
        }
    }

    /// Whether a pinned model may be stopped for this reason: pinned models are never evicted,
    /// but an operator or a shutdown still stops them.
    pub fn applies_to_pinned(self) -> bool {
        !matches!(self, StopReason::Evicted | StopReason::Idle)
    }
}

/// How a process ended, as the reaper saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(code) => write!(f, "exit code {code}"),
            ExitStatus::Signal(signal) => write!(f, "signal {signal}"),
        }
    }
}

/// Why a model is in `Failed`: its worker died, or it never became a worker at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitInfo {
    Exited {
        pid: u32,
        status: ExitStatus,
    },
    /// Spawn, handshake or model load failed; the launch's error, as text.
    LaunchFailed {
        message: String,
    },
    /// The model can never start (`LaunchError::Unservable`); `reason` names its path.
    Unservable {
        reason: String,
    },
}

impl fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitInfo::Exited { pid, status } => write!(f, "worker pid {pid} ended with {status}"),
            ExitInfo::LaunchFailed { message } => write!(f, "worker failed to start: {message}"),
            ExitInfo::Unservable { reason } => write!(f, "the model cannot be served: {reason}"),
        }
    }
}

/// A ready worker: what a lease hands to its holder and what a stop order carries.
#[derive(Debug, Clone)]
pub struct Worker<H> {
    pub pid: u32,
    /// Unique per start within the pool, unlike a pid, which the kernel may reuse.
    pub generation: u64,
    pub handle: H,
}

/// One model's state.
#[derive(Debug)]
pub enum EntryState<H> {
    NotRunning,
    Starting {
        generation: u64,
        started_at: Instant,
        /// What admission counted this start at until the worker has a footprint.
        estimate: u64,
        /// An exit the reaper reported before the launch returned: if it is the launched pid,
        /// the worker is dead on arrival and must not become `Ready`.
        early_exit: Option<(u32, ExitStatus)>,
    },
    Ready {
        worker: Worker<H>,
        leases: u32,
        last_used: Instant,
        ready_since: Instant,
        /// Whether this worker has finished a request (its death then starts no crash loop).
        served: bool,
    },
    Stopping {
        pid: u32,
        reason: StopReason,
        since: Instant,
    },
    Failed {
        exit: ExitInfo,
        retry_at: Instant,
    },
}

impl<H> EntryState<H> {
    /// The state's name and the facts an admin view shows, without the handle.
    pub fn phase(&self) -> Phase {
        match self {
            EntryState::NotRunning => Phase::NotRunning,
            EntryState::Starting { .. } => Phase::Starting,
            EntryState::Ready { .. } => Phase::Ready,
            EntryState::Stopping { reason, .. } => Phase::Stopping(*reason),
            EntryState::Failed { .. } => Phase::Failed,
        }
    }

    /// When this state's start, readiness or stop began.
    pub fn since(&self) -> Option<Instant> {
        match self {
            EntryState::Starting { started_at, .. } => Some(*started_at),
            EntryState::Ready { ready_since, .. } => Some(*ready_since),
            EntryState::Stopping { since, .. } => Some(*since),
            EntryState::NotRunning | EntryState::Failed { .. } => None,
        }
    }

    /// The pid of the process this state stands for, where the pool knows it.
    pub fn pid(&self) -> Option<u32> {
        match self {
            EntryState::Ready { worker, .. } => Some(worker.pid),
            EntryState::Stopping { pid, .. } => Some(*pid),
            _ => None,
        }
    }
}

/// An entry's state without its data, for snapshots and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    NotRunning,
    Starting,
    Ready,
    Stopping(StopReason),
    Failed,
}

impl Phase {
    /// The name the admin API and metrics use.
    pub fn name(self) -> &'static str {
        match self {
            Phase::NotRunning => "not_running",
            Phase::Starting => "starting",
            Phase::Ready => "ready",
            Phase::Stopping(_) => "stopping",
            Phase::Failed => "failed",
        }
    }
}

/// One model's entry: its state plus what outlives any one worker.
#[derive(Debug)]
pub struct Entry<H> {
    pub state: EntryState<H>,
    /// Pinned models are never evicted or stopped for idleness.
    pub pinned: bool,
    /// Unexpected exits and failed starts since the supervisor started, for metrics.
    pub restarts: u64,
    /// How the last worker of this model ended (or failed to start), for the admin API.
    pub last_exit: Option<ExitInfo>,
    /// Failures in a row, for the crash-loop rule (see the module's documentation).
    pub streak: u32,
}

impl<H> Default for Entry<H> {
    fn default() -> Self {
        Self {
            state: EntryState::NotRunning,
            pinned: false,
            restarts: 0,
            last_exit: None,
            streak: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_starts_at_the_third_failure_doubles_from_one_second_and_caps_at_thirty() {
        let secs: Vec<u64> = (1..=10).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [0, 0, 1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(backoff(u32::MAX), BACKOFF_CAP);
    }

    #[test]
    fn only_operator_and_shutdown_stops_apply_to_pinned_models() {
        assert!(!StopReason::Evicted.applies_to_pinned());
        assert!(!StopReason::Idle.applies_to_pinned());
        assert!(StopReason::Shutdown.applies_to_pinned());
        assert!(StopReason::Killed.applies_to_pinned());
        assert!(StopReason::Unload.applies_to_pinned());
    }
}
