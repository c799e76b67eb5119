//! How the pool gets a worker process, behind a trait so the state machine can be tested with a
//! simulated launcher and the real one (spawn `corral-worker serve`, socket, handshake, reaper)
//! can land on its own.
//!
//! Contract for an implementation:
//! - `launch` returns once the worker is ready to serve (its `Ready` frame came), or fails. It
//!   bounds its own waits (handshake timeout, load timeout): the pool does not time it out.
//! - From the moment it spawns a process, a reaper must report that process's exit with
//!   `Pool::on_exit`, even if the exit comes before `launch` has returned (the pool keeps such an
//!   early exit and refuses the dead worker). A process of a failed launch is killed and reaped
//!   before `launch` returns its error.
//! - `launch` runs in its own task, so a request that stops waiting does not cancel a start
//!   that other requests may be waiting on.

use std::future::Future;

use super::state::ExitStatus;

/// A worker that finished starting: its pid and whatever the pool hands to lease holders (the
/// real launcher's connection handle; a test's token).
#[derive(Debug, Clone)]
pub struct LaunchedWorker<H> {
    pub pid: u32,
    pub handle: H,
}

pub trait Launcher: Send + Sync + 'static {
    /// Shared by every lease on one worker, so cheap to clone (an `Arc` in practice).
    type Handle: Clone + Send + Sync + 'static;

    fn launch(
        &self,
        model: &str,
    ) -> impl Future<Output = Result<LaunchedWorker<Self::Handle>, LaunchError>> + Send;
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
    #[error("the worker for {model} (pid {pid}) could not load the model: {message}")]
    LoadFailed {
        model: String,
        pid: u32,
        message: String,
    },
    #[error("the worker for {model} (pid {pid}) ended with {status} before it was ready")]
    Exited {
        model: String,
        pid: u32,
        status: ExitStatus,
    },
}
