//! The supervisor's side of a worker connection, against a fake worker that speaks the protocol
//! over `UnixStream::pair()`. A real `sleep` process stands in for the worker's process, so exit
//! handling is the real reaper's.

use std::process::Stdio;

use corral_ipc::{
    FinishReason, FromWorker, GenerateRequest, Prompt, Timings, ToWorker, Usage, WorkerConnection,
    WorkerStats,
};
use nix::sys::signal::Signal;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::process::Command;
use tokio::sync::mpsc;

use super::super::client::{ClientError, WorkerClient};
use super::super::reaper::WorkerProcess;
use super::{Exited, noted_exits};
use corral_ipc::SupervisorConnection;

pub(super) fn spawn_watched(
    program: &str,
    args: &[&str],
) -> (WorkerProcess, mpsc::UnboundedReceiver<Exited>) {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (exits, exit_rx) = noted_exits();
    (WorkerProcess::watch(child, "test-model", exits), exit_rx)
}

/// A client on a `sleep` process, and the fake worker's end of the connection.
pub(super) fn connected(process: WorkerProcess) -> (WorkerClient, UnixStream) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let client = WorkerClient::new("test-model", SupervisorConnection::new(ours), process);
    (client, theirs)
}

fn request() -> GenerateRequest {
    GenerateRequest::greedy(Prompt::Text("hi".into()), 4)
}

fn done(id: u64) -> FromWorker {
    FromWorker::Done {
        id,
        finish_reason: FinishReason::Stop,
        stop_sequence: None,
        usage: Usage {
            prompt_tokens: 1,
            completion_tokens: 1,
            cached_tokens: 0,
            drafted_tokens: 0,
            accepted_tokens: 0,
            diverged_at: None,
        },
        timings: Timings {
            prefill_ms: 0,
            decode_ms: 0,
            images_encoded: 0,
            image_encode_ms: 0,
        },
    }
}

fn delta(id: u64, text: &str) -> FromWorker {
    FromWorker::Delta {
        id,
        text: text.into(),
        reasoning: String::new(),
        tool_calls: Vec::new(),
        token_count: 1,
        logprobs: None,
    }
}

async fn next_generate_id(peer: &mut WorkerConnection) -> u64 {
    match peer.recv().await.unwrap() {
        Some(ToWorker::Generate { id, .. }) => id,
        other => panic!("expected Generate, got {other:?}"),
    }
}

#[tokio::test]
async fn interleaved_frames_reach_their_own_requests() {
    let (process, _exits) = spawn_watched("sleep", &["60"]);
    let (client, theirs) = connected(process);
    let mut peer = WorkerConnection::new(theirs);
    let mut first = client.generate(request()).await.unwrap();
    let mut second = client.generate(request()).await.unwrap();
    let (a, b) = (
        next_generate_id(&mut peer).await,
        next_generate_id(&mut peer).await,
    );
    assert_eq!((a, b), (first.id, second.id));

    for frame in [
        FromWorker::Accepted {
            id: b,
            prompt_tokens: 2,
            cached_tokens: None,
        },
        FromWorker::Accepted {
            id: a,
            prompt_tokens: 1,
            cached_tokens: None,
        },
        delta(a, "x"),
        delta(b, "y"),
        done(b),
        delta(a, "z"),
        done(a),
    ] {
        peer.send(&frame).await.unwrap();
    }

    let mut got_a = Vec::new();
    while let Some(frame) = first.events.recv().await {
        got_a.push(frame);
    }
    let mut got_b = Vec::new();
    while let Some(frame) = second.events.recv().await {
        got_b.push(frame);
    }
    assert_eq!(
        got_a,
        vec![
            FromWorker::Accepted {
                id: a,
                prompt_tokens: 1,
                cached_tokens: None,
            },
            delta(a, "x"),
            delta(a, "z"),
            done(a)
        ]
    );
    assert_eq!(
        got_b,
        vec![
            FromWorker::Accepted {
                id: b,
                prompt_tokens: 2,
                cached_tokens: None,
            },
            delta(b, "y"),
            done(b)
        ]
    );
}

#[tokio::test]
async fn cancel_and_stats_go_to_the_worker_and_stats_come_back() {
    let (process, _exits) = spawn_watched("sleep", &["60"]);
    let pid = process.pid();
    let (client, theirs) = connected(process);
    let mut peer = WorkerConnection::new(theirs);
    client.cancel(7);
    assert_eq!(peer.recv().await.unwrap(), Some(ToWorker::Cancel { id: 7 }));

    let stats = WorkerStats {
        pid,
        active_sequences: 1,
        queued_requests: 0,
        completed: 3,
        cancelled: 1,
        mlx_active_bytes: 10,
        mlx_cache_bytes: 20,
        mlx_peak_bytes: 30,
        resident_bytes: 40,
        prefix_cache: None,
    };
    let fake = tokio::spawn(async move {
        assert_eq!(peer.recv().await.unwrap(), Some(ToWorker::GetStats));
        peer.send(&FromWorker::Stats(stats)).await.unwrap();
        peer
    });
    assert_eq!(client.stats().await.unwrap(), stats);
    drop(fake.await.unwrap());
}

#[tokio::test]
async fn eof_fails_pending_requests_and_later_ones() {
    let (process, _exits) = spawn_watched("sleep", &["60"]);
    let pid = process.pid();
    let (client, theirs) = connected(process);
    let mut peer = WorkerConnection::new(theirs);
    let mut pending = client.generate(request()).await.unwrap();
    next_generate_id(&mut peer).await;
    drop(peer);

    match pending.events.recv().await {
        Some(FromWorker::Error { id, message }) => {
            assert_eq!(id, pending.id);
            assert!(
                message.contains("test-model") && message.contains(&pid.to_string()),
                "{message}"
            );
        }
        other => panic!("expected Error, got {other:?}"),
    }
    assert!(pending.events.recv().await.is_none());
    assert!(matches!(
        client.generate(request()).await,
        Err(ClientError::Closed { .. })
    ));
}

#[tokio::test]
async fn a_garbage_frame_fails_requests_and_closes_the_connection() {
    let (process, _exits) = spawn_watched("sleep", &["60"]);
    let (client, mut theirs) = connected(process);
    let mut pending = client.generate(request()).await.unwrap();
    // 0xc1 is never valid MessagePack.
    theirs
        .write_all(&[0, 0, 0, 3, 0xc1, 0xc1, 0xc1])
        .await
        .unwrap();

    match pending.events.recv().await {
        Some(FromWorker::Error { message, .. }) => {
            assert!(message.contains("bad frame"), "{message}")
        }
        other => panic!("expected Error, got {other:?}"),
    }
    // The supervisor side shut its writer: the fake worker reaches the end of the stream.
    let mut peer = WorkerConnection::new(theirs);
    let drained = tokio::time::timeout(super::PATIENCE, async {
        while let Ok(Some(_)) = peer.recv().await {}
    });
    assert!(drained.await.is_ok(), "the connection stayed open");
}

#[tokio::test]
async fn a_killed_worker_fails_its_requests_naming_the_signal() {
    let (process, mut exits) = spawn_watched("sleep", &["60"]);
    let pid = process.pid();
    let (client, theirs) = connected(process.clone());
    let mut pending = client.generate(request()).await.unwrap();

    process.signal(Signal::SIGKILL);

    let frame = tokio::time::timeout(super::PATIENCE, pending.events.recv())
        .await
        .unwrap();
    match frame {
        Some(FromWorker::Error { message, .. }) => {
            assert!(
                message.contains("signal 9") && message.contains(&pid.to_string()),
                "{message}"
            );
        }
        other => panic!("expected Error, got {other:?}"),
    }
    let exit = exits.recv().await.unwrap();
    assert_eq!((exit.model.as_str(), exit.pid), ("test-model", pid));
    drop(theirs);
}

#[tokio::test]
async fn fail_all_ends_every_request_once() {
    let (process, _exits) = spawn_watched("sleep", &["60"]);
    let (client, _theirs) = connected(process);
    let mut first = client.generate(request()).await.unwrap();
    let mut second = client.generate(request()).await.unwrap();

    client.fail_all("going away");

    for handle in [&mut first, &mut second] {
        let expected = FromWorker::Error {
            id: handle.id,
            message: "going away".into(),
        };
        assert_eq!(handle.events.recv().await, Some(expected));
        assert_eq!(handle.events.recv().await, None);
    }
    assert!(matches!(
        client.stats().await,
        Err(ClientError::Closed { .. })
    ));
}
