//! What the pool needs from the world outside its state machine, behind one trait so that the
//! machine and its async driver can be tested with simulated processes: launching a worker,
//! stopping one, and measuring one. The real implementation (spawn `corral-worker serve`,
//! socket, handshake, reaper, the stop protocol) is `crate::process::WorkerProcesses`.
//!
//! Contract for an implementation:
//! - `launch` returns once the worker is ready to serve (its `Ready` frame came), or fails. It
//!   bounds its own waits (handshake timeout, load timeout): the pool does not time it out. A
//!   model that can never start fails as [`LaunchError::Unservable`], which the pool does not
//!   retry; every other failure counts toward the crash-loop backoff.
//! - From the moment it spawns a process, a reaper must report that process's exit with
//!   `Pool::on_exit`, even if the exit comes before `launch` has returned (the pool keeps such an
//!   early exit and refuses the dead worker). A process of a failed launch is killed and reaped
//!   before `launch` returns its error.
//! - `stop` returns once the process has been reaped; the reaper's `Pool::on_exit` is what
//!   completes the stop in the pool.
//! - `launch` and `stop` run in tasks of their own, so a request that stops waiting cancels
//!   neither a start other requests wait on nor a stop that admission counts on.

use std::future::Future;

use nix::sys::signal::Signal;

use super::state::{ExitStatus, StopReason, Worker};

/// A worker that finished starting: its pid and whatever the pool hands to lease holders (the
/// real worker connection; a test's token).
#[derive(Debug, Clone)]
pub struct LaunchedWorker<H> {
    pub pid: u32,
    pub handle: H,
}

/// How to stop a worker: the graceful protocol (`Shutdown`, then SIGTERM, then SIGKILL), or a
/// signal now (an operator's kill; SIGKILL follows a grace period after a softer one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOrder {
    Graceful(StopReason),
    Signal(Signal),
}

impl StopOrder {
    pub fn reason(self) -> StopReason {
        match self {
            StopOrder::Graceful(reason) => reason,
            StopOrder::Signal(_) => StopReason::Killed,
        }
    }
}

pub trait Processes: Send + Sync + 'static {
    /// Shared by every lease on one worker, so cheap to clone (an `Arc` in practice).
    type Handle: Clone + Send + Sync + 'static;
    /// What a finished stop reports (the real one: the ledger's record).
    type Stopped: Send + 'static;

    /// Starts `model`'s worker with `memory_limit` bytes as its share of the budget.
    fn launch(
        &self,
        model: &str,
        memory_limit: u64,
    ) -> impl Future<Output = Result<LaunchedWorker<Self::Handle>, LaunchError>> + Send;

    /// Ends `worker` as `order` says and returns once it has been reaped.
    fn stop(
        &self,
        model: &str,
        worker: Worker<Self::Handle>,
        order: StopOrder,
    ) -> impl Future<Output = Self::Stopped> + Send;

    /// What the process `pid` holds now; 0 once it is gone.
    fn footprint(&self, pid: u32) -> u64;

    /// What `model` is expected to hold once loaded, for admission.
    fn estimate(&self, model: &str) -> u64;
}

/// Why a worker could not be started. The cause is part of the message (not a `source`), so a
/// `%err` log line is complete, as in the ipc crate's errors.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot spawn the worker for {model}: {error}")]
    Spawn {
        model: String,
        error: std::io::Error,
    },
    #[error("the worker for {model} (pid {pid}) failed the handshake: {reason}")]
    Handshake {
        model: String,
        pid: u32,
        reason: String,
    },
    /// A failure to load that may pass (memory, I/O).
    #[error("the worker for {model} (pid {pid}) could not load the model: {message}")]
    LoadFailed {
        model: String,
        pid: u32,
        message: String,
    },
    /// The model can never start: its worker found that its files cannot load, or the registry
    /// no longer serves it. `reason` names the model's path. No retry can help, so it is no
    /// failure of the crash-loop rule.
    #[error("the model `{model}` cannot be served: {reason}")]
    Unservable { model: String, reason: String },
    /// A rank on another host could not start; `reason` names the host.
    #[error("cannot start the worker group for {model}: {reason}")]
    Cluster { model: String, reason: String },
    #[error(
        "the worker for {model} (pid {pid}) ended with {status} before it was ready{}",
        said.as_ref().map(|said| format!(": {said}")).unwrap_or_default()
    )]
    Exited {
        model: String,
        pid: u32,
        status: ExitStatus,
        /// The error it wrote as it ended.
        said: Option<String>,
    },
}
