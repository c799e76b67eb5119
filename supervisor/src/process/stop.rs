//! Ending a worker, politely first: `Shutdown` lets it finish or cancel its sequences and flush
//! its SSD cache; SIGTERM after a grace period; SIGKILL after another. Every step waits on the
//! reaper's exit status, not on `kill(pid, 0)`, so "gone" means reaped and the pid cannot have
//! been recycled under us.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::client::WorkerClient;
use crate::pool::ExitStatus;

/// Which step of the stop protocol ended the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopStep {
    /// It exited after `Shutdown` (or had exited already).
    Graceful,
    /// SIGTERM ended it.
    Terminated,
    /// It needed SIGKILL.
    Killed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    pub step: StopStep,
    pub status: ExitStatus,
}

/// Stops `client`'s worker and returns once it has been reaped. Each step waits up to `grace`;
/// after SIGKILL it waits as long as the kernel takes.
pub async fn stop_worker(client: &WorkerClient, grace: Duration) -> Stopped {
    let process = client.process();
    client.shutdown();
    if let Ok(status) = tokio::time::timeout(grace, process.wait()).await {
        return Stopped {
            step: StopStep::Graceful,
            status,
        };
    }
    tracing::warn!(
        model = client.model(),
        pid = client.pid(),
        "worker ignored Shutdown; sending SIGTERM"
    );
    process.signal(Signal::SIGTERM);
    if let Ok(status) = tokio::time::timeout(grace, process.wait()).await {
        return Stopped {
            step: StopStep::Terminated,
            status,
        };
    }
    tracing::warn!(
        model = client.model(),
        pid = client.pid(),
        "worker ignored SIGTERM; sending SIGKILL"
    );
    kill_now(client);
    Stopped {
        step: StopStep::Killed,
        status: process.wait().await,
    }
}

/// SIGKILL at once (`corral kill MODEL`); the reaper reports the exit as for any other.
pub fn kill_now(client: &WorkerClient) {
    client.process().signal(Signal::SIGKILL);
}
