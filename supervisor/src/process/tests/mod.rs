//! Unit tests of the process side, against real child processes (`sh`, `sleep`) and socket
//! pairs standing in for workers.

mod client;
mod run_dir;
mod spawn;
mod stop;

use std::time::Duration;

use tokio::sync::mpsc;

use super::reaper::WorkerExit;
use crate::pool::ExitStatus;

/// How long a test waits for a process or a connection before it calls it a hang: only a
/// guard, far beyond what a busy machine takes.
const PATIENCE: Duration = Duration::from_secs(300);

/// An exit as a test sees it, after it was acknowledged as the pool would.
#[derive(Debug)]
pub(super) struct Exited {
    pub model: String,
    pub pid: u32,
    pub status: ExitStatus,
}

/// An exit channel for a reaper, with a task that acknowledges every exit (the reaper publishes
/// the status only then) and passes it on to the test.
pub(super) fn noted_exits() -> (
    mpsc::UnboundedSender<WorkerExit>,
    mpsc::UnboundedReceiver<Exited>,
) {
    let (exits, mut incoming) = mpsc::unbounded_channel::<WorkerExit>();
    let (seen, seen_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(exit) = incoming.recv().await {
            let _ = seen.send(Exited {
                model: exit.model.clone(),
                pid: exit.pid,
                status: exit.status,
            });
            exit.noted();
        }
    });
    (exits, seen_rx)
}
