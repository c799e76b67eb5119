//! The state of one model's entry in the pool, as the architecture draws it:
//!
//! ```text
//! NotRunning -> Starting -> Ready(pid, leases, last_used) -> Stopping(reason) -> NotRunning (reaped)
//!                   \-> Failed(exit, backoff) -> Starting (once the backoff has passed)
//! ```
//!
//! These are plain values; every transition is one method on `PoolState` (`machine.rs`), called
//! under the pool's one lock. The lease count lives in `Ready` itself, so there is no state in
//! which a leased worker can look idle, and `Stopping` has no count at all: a worker is only
//! stopped once its count is zero.

use std::fmt;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The first retry waits this long; each further failure in a row doubles it.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// The longest a crash-looping model waits before its next start.
pub const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// A worker that was ready at least this long before it died counts as having recovered: its
/// crash starts a new streak instead of lengthening the backoff of the old one.
pub const STABLE_AFTER: Duration = Duration::from_secs(60);

/// How long to wait before the next start after `attempts` failures in a row (1 s, 2 s, 4 s ...
/// up to [`BACKOFF_CAP`]).
pub fn backoff(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    BACKOFF_BASE.saturating_mul(1 << doublings).min(BACKOFF_CAP)
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
    /// Spawn, handshake or model load failed; the launcher's error, as text.
    LaunchFailed {
        message: String,
    },
}

impl fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitInfo::Exited { pid, status } => write!(f, "worker pid {pid} ended with {status}"),
            ExitInfo::LaunchFailed { message } => write!(f, "worker failed to start: {message}"),
        }
    }
}

/// The tasks waiting for a `Starting` or `Stopping` entry to move on. Nothing is ever sent:
/// the sender is dropped with the state it belongs to, and every receiver's `changed()` then
/// returns, so no transition can forget to wake its waiters.
#[derive(Debug)]
pub struct Waiters(watch::Sender<()>);

impl Default for Waiters {
    fn default() -> Self {
        Self(watch::channel(()).0)
    }
}

impl Waiters {
    /// A receiver whose `changed()` resolves once this state has been left. Taken under the
    /// lock, so the wake-up cannot be missed.
    pub fn subscribe(&self) -> watch::Receiver<()> {
        self.0.subscribe()
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

/// One model's state. `attempts` counts the failed starts and early crashes in a row that led
/// here, for the backoff.
#[derive(Debug)]
pub enum EntryState<H> {
    NotRunning,
    Starting {
        generation: u64,
        started_at: Instant,
        attempts: u32,
        waiters: Waiters,
        /// An exit the reaper reported before the launch returned: if it is the launched pid,
        /// the worker is dead on arrival and must not become `Ready`.
        early_exit: Option<(u32, ExitStatus)>,
    },
    Ready {
        worker: Worker<H>,
        leases: u32,
        last_used: Instant,
        ready_since: Instant,
        attempts: u32,
    },
    Stopping {
        pid: u32,
        reason: StopReason,
        since: Instant,
        waiters: Waiters,
    },
    Failed {
        exit: ExitInfo,
        attempts: u32,
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
}

impl<H> Default for Entry<H> {
    fn default() -> Self {
        Self {
            state: EntryState::NotRunning,
            pinned: false,
            restarts: 0,
            last_exit: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_and_caps_at_thirty() {
        let secs: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30, 30]);
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
