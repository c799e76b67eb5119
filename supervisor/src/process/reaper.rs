//! The one task that owns a spawned worker's `Child`: it waits for the exit, publishes the
//! status, and reports it to the pool. Every signal to the worker goes through it too, because
//! only the owner of the `Child` knows whether the pid has been reaped: a signal sent by pid
//! after the reap could hit an unrelated process that got the recycled pid.

use std::os::unix::process::ExitStatusExt;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot, watch};

use crate::pool::ExitStatus;

/// A worker ended: what the caller feeds to `Pool::on_exit`, then acknowledges with `noted`.
#[derive(Debug)]
pub struct WorkerExit {
    pub model: String,
    pub pid: u32,
    pub status: ExitStatus,
    ack: oneshot::Sender<()>,
}

impl WorkerExit {
    /// The pool has applied this exit: only now do the waiters on the exit status (the worker's
    /// connection failing its requests, a stop) go on. Dropping it unacknowledged lets them go
    /// on too.
    pub fn noted(self) {
        let _ = self.ack.send(());
    }
}

/// A handle on a spawned process: its exit status once reaped, and a way to signal it that
/// can never reach another process.
#[derive(Debug, Clone)]
pub struct WorkerProcess {
    pid: u32,
    signals: mpsc::UnboundedSender<Signal>,
    exit: watch::Receiver<Option<ExitStatus>>,
}

impl WorkerProcess {
    /// Starts the reaper for `child` (spawned for `model`); its exit goes to `exits`.
    pub fn watch(
        mut child: Child,
        model: &str,
        exits: mpsc::UnboundedSender<WorkerExit>,
    ) -> WorkerProcess {
        // Only a child that was already reaped has no id, and nobody but us reaps it.
        let pid = child.id().unwrap_or(0);
        let (signals, mut incoming) = mpsc::unbounded_channel();
        let (exit_tx, exit) = watch::channel(None);
        let model = model.to_owned();
        tokio::spawn(async move {
            let status = loop {
                tokio::select! {
                    status = child.wait() => break to_exit_status(status, &model, pid),
                    Some(signal) = incoming.recv() => send_signal(&mut child, signal, &model),
                }
            };
            tracing::info!(model, pid, %status, "worker exited");
            // The pool hears of the exit before anyone who waits on the status: a client whose
            // stream failed with it, and sends its next request, then finds the model not running
            // rather than the dead worker still ready.
            let (ack, noted) = oneshot::channel();
            // The pool may be gone (supervisor shutting down); nobody is left to tell.
            let _ = exits.send(WorkerExit {
                model,
                pid,
                status,
                ack,
            });
            let _ = noted.await;
            exit_tx.send_replace(Some(status));
        });
        WorkerProcess { pid, signals, exit }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `signal` unless the process has already been reaped.
    pub fn signal(&self, signal: Signal) {
        // A closed channel means the reaper is done: the process is gone already.
        let _ = self.signals.send(signal);
    }

    /// The exit status, if the process has been reaped.
    pub fn exited(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }

    /// Waits until the process has been reaped.
    pub async fn wait(&self) -> ExitStatus {
        let mut exit = self.exit.clone();
        match exit.wait_for(Option::is_some).await {
            Ok(status) => status.unwrap_or(ExitStatus::Code(-1)),
            // The sender is only dropped after publishing, so this is unreachable in practice;
            // reading the last value keeps it correct anyway.
            Err(_) => self.exited().unwrap_or(ExitStatus::Code(-1)),
        }
    }
}

fn send_signal(child: &mut Child, signal: Signal, model: &str) {
    let Some(pid) = child.id() else { return };
    let result = match i32::try_from(pid) {
        Ok(raw) => kill(Pid::from_raw(raw), signal),
        Err(_) => return,
    };
    if let Err(error) = result {
        tracing::warn!(model, pid, %signal, %error, "cannot signal the worker");
    }
}

fn to_exit_status(
    status: std::io::Result<std::process::ExitStatus>,
    model: &str,
    pid: u32,
) -> ExitStatus {
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatus::Code(code),
            (None, Some(signal)) => ExitStatus::Signal(signal),
            // wait() reports only exits and deaths by signal, never stops.
            (None, None) => ExitStatus::Code(-1),
        },
        Err(error) => {
            // waitpid failing means the child is not ours to wait for any more; treat it as
            // gone so nothing waits on it forever.
            tracing::error!(model, pid, %error, "cannot wait for the worker");
            ExitStatus::Code(-1)
        }
    }
}
