//! The one stop protocol, for every way a worker is ended. Gracefully: `Shutdown` lets it finish
//! or cancel its sequences and flush its SSD cache; SIGTERM after a grace period; SIGKILL after
//! another. On an operator's order: the signal now, and SIGKILL a grace period later if a softer
//! signal did not end it. Every step waits on the reaper's exit status, not on `kill(pid, 0)`,
//! and every signal goes through the reaper's handle, so "gone" means reaped and no signal can
//! reach a process that got the recycled pid.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::client::WorkerClient;
use crate::pool::{ExitStatus, StopOrder};

/// Which step of the stop protocol ended the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopStep {
    /// It exited after `Shutdown` (or had exited already).
    Graceful,
    /// SIGTERM (or the operator's softer signal) ended it.
    Terminated,
    /// It needed SIGKILL.
    Killed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    pub step: StopStep,
    pub status: ExitStatus,
}

/// Ends `client`'s worker as `order` says and returns once it has been reaped. Each step before
/// SIGKILL waits up to `grace`; after SIGKILL it waits as long as the kernel takes.
pub async fn stop(client: &WorkerClient, order: StopOrder, grace: Duration) -> Stopped {
    let process = client.process();
    let first = match order {
        StopOrder::Graceful(_) => {
            client.shutdown();
            StopStep::Graceful
        }
        StopOrder::Signal(Signal::SIGKILL) => return kill(client).await,
        StopOrder::Signal(signal) => {
            tracing::warn!(model = client.model(), pid = client.pid(), %signal, "signalling a worker on request");
            process.signal(signal);
            StopStep::Terminated
        }
    };
    if let Ok(status) = tokio::time::timeout(grace, process.wait()).await {
        return Stopped {
            step: first,
            status,
        };
    }
    if first == StopStep::Graceful {
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
    }
    tracing::warn!(
        model = client.model(),
        pid = client.pid(),
        "worker is still alive; sending SIGKILL"
    );
    kill(client).await
}

/// SIGKILL now, then the reap.
async fn kill(client: &WorkerClient) -> Stopped {
    let process = client.process();
    process.signal(Signal::SIGKILL);
    Stopped {
        step: StopStep::Killed,
        status: process.wait().await,
    }
}
