//! The stop protocol's escalation, against real processes: one that exits on `Shutdown`, one
//! that only SIGTERM ends, and one that ignores SIGTERM; and an operator's signals.

use std::process::Stdio;
use std::time::Duration;

use corral_ipc::{ToWorker, WorkerConnection};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use nix::sys::signal::Signal;

use super::super::reaper::WorkerProcess;
use super::super::stop::{StopStep, Stopped, stop};
use super::client::{connected, spawn_watched};
use crate::pool::{ExitStatus, StopOrder, StopReason};

const GRACEFUL: StopOrder = StopOrder::Graceful(StopReason::Unload);
/// For a step the process is sure to outlast: it ignores the step's request.
const GRACE: Duration = Duration::from_millis(300);
/// For a step the process ends by dying of SIGTERM, after one it outlasts (the same grace serves
/// both, so the test waits all of it): far longer than a busy machine takes to deliver the signal
/// and reap the process.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// Stops a process standing in for a worker whose connection reads and ignores every frame.
async fn stop_deaf(program: &str, args: &[&str], order: StopOrder, grace: Duration) -> Stopped {
    let (process, _exits) = spawn_watched(program, args);
    let (client, theirs) = connected(process);
    deaf_peer(theirs);
    stop(&client, order, grace).await
}

fn ended(step: StopStep, status: ExitStatus) -> Stopped {
    Stopped { step, status }
}

/// Reads and ignores every frame, as a worker stuck in a GPU call would.
fn deaf_peer(theirs: tokio::net::UnixStream) {
    tokio::spawn(async move {
        let mut peer = WorkerConnection::new(theirs);
        while let Ok(Some(_)) = peer.recv().await {}
    });
}

#[tokio::test]
async fn a_worker_that_obeys_shutdown_stops_gracefully() {
    let mut child = Command::new("sh")
        .args(["-c", "read line; exit 0"])
        .stdin(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (exits, _exit_rx) = super::noted_exits();
    let (client, theirs) = connected(WorkerProcess::watch(child, "test-model", exits));
    // The fake worker exits when it reads Shutdown.
    tokio::spawn(async move {
        let mut peer = WorkerConnection::new(theirs);
        while let Ok(Some(frame)) = peer.recv().await {
            if frame == ToWorker::Shutdown {
                stdin.write_all(b"\n").await.unwrap();
            }
        }
    });

    let stopped = stop(&client, GRACEFUL, super::PATIENCE).await;
    assert_eq!(
        stopped,
        Stopped {
            step: StopStep::Graceful,
            status: ExitStatus::Code(0)
        }
    );
}

#[tokio::test]
async fn a_worker_that_ignores_shutdown_is_terminated() {
    let stopped = stop_deaf("sleep", &["60"], GRACEFUL, TERM_GRACE).await;
    assert_eq!(stopped, ended(StopStep::Terminated, ExitStatus::Signal(15)));
}

#[tokio::test]
async fn a_worker_that_ignores_sigterm_is_killed() {
    // An ignored signal stays ignored across exec, so `sleep` itself ignores SIGTERM. The file
    // says the trap is set: the SIGTERM must not come before it, however slowly bash starts.
    let dir = tempfile::tempdir().unwrap();
    let trapped = dir.path().join("trapped");
    let script = format!("trap '' TERM; : > '{}'; exec sleep 60", trapped.display());
    let (process, _exits) = spawn_watched("bash", &["-c", &script]);
    let set = tokio::time::timeout(super::PATIENCE, async {
        while !trapped.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(set.await.is_ok(), "bash never set its trap");
    let (client, theirs) = connected(process);
    deaf_peer(theirs);
    let stopped = stop(&client, GRACEFUL, GRACE).await;
    assert_eq!(stopped, ended(StopStep::Killed, ExitStatus::Signal(9)));
}

#[tokio::test]
async fn an_operators_sigkill_ends_the_worker_at_once() {
    let (process, mut exits) = spawn_watched("sleep", &["60"]);
    let pid = process.pid();
    let (client, theirs) = connected(process);
    deaf_peer(theirs);

    let stopped = stop(
        &client,
        StopOrder::Signal(Signal::SIGKILL),
        Duration::from_secs(60),
    )
    .await;

    assert_eq!(stopped.step, StopStep::Killed);
    let exit = exits.recv().await.unwrap();
    assert_eq!((exit.pid, exit.status), (pid, ExitStatus::Signal(9)));
    assert_eq!(client.process().exited(), Some(ExitStatus::Signal(9)));
}

#[tokio::test]
async fn an_operators_signal_that_does_not_end_the_worker_is_followed_by_sigkill() {
    // SIGCONT does nothing to a running process, whatever the timing.
    let order = StopOrder::Signal(Signal::SIGCONT);
    let stopped = stop_deaf("sleep", &["60"], order, GRACE).await;
    assert_eq!(stopped, ended(StopStep::Killed, ExitStatus::Signal(9)));
}

#[tokio::test]
async fn an_operators_sigterm_that_works_is_reported_as_terminated() {
    let order = StopOrder::Signal(Signal::SIGTERM);
    let stopped = stop_deaf("sleep", &["60"], order, Duration::from_secs(60)).await;
    assert_eq!(stopped, ended(StopStep::Terminated, ExitStatus::Signal(15)));
}
