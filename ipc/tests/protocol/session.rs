//! A whole session as the real processes run it: a listener in a private directory, a worker
//! that connects, the handshake, then requests and answers flowing through split halves.

use corral_ipc::*;
use tokio::net::{UnixListener, UnixStream};

use crate::samples;

const TOKEN: &str = "session-token";

/// A scripted worker: answers one Generate with a short stream, answers GetStats, and leaves on
/// Shutdown.
async fn fake_worker(path: std::path::PathBuf) {
    let stream = UnixStream::connect(&path).await.expect("connect");
    let mut conn = worker_handshake(stream, TOKEN).await.expect("welcomed");
    let ready = samples::from_worker()[1].clone();
    conn.send(&ready).await.expect("send Ready");
    while let Some(msg) = conn.recv().await.expect("decodes") {
        match msg {
            ToWorker::Generate { id, .. } => {
                conn.send(&FromWorker::Accepted {
                    id,
                    prompt_tokens: 4,
                    cached_tokens: None,
                })
                .await
                .expect("send");
                for text in ["Hel", "lo"] {
                    let delta = FromWorker::Delta {
                        id,
                        text: text.into(),
                        reasoning: String::new(),
                        tool_calls: Vec::new(),
                        token_count: 1,
                        logprobs: None,
                    };
                    conn.send(&delta).await.expect("send");
                }
                let done = FromWorker::Done {
                    id,
                    finish_reason: FinishReason::Stop,
                    stop_sequence: None,
                    usage: Usage {
                        prompt_tokens: 4,
                        completion_tokens: 2,
                        cached_tokens: 0,
                        drafted_tokens: 0,
                        accepted_tokens: 0,
                        diverged_at: None,
                    },
                    timings: Timings {
                        prefill_ms: 1,
                        decode_ms: 2,
                        images_encoded: 0,
                        image_encode_ms: 0,
                    },
                };
                conn.send(&done).await.expect("send");
            }
            ToWorker::GetStats => {
                let stats = samples::from_worker().pop().expect("Stats sample");
                conn.send(&stats).await.expect("send");
            }
            ToWorker::Shutdown => return,
            other => panic!("worker did not expect {}", other.name()),
        }
    }
}

#[tokio::test]
async fn supervisor_and_worker_exchange_a_request_over_a_listener() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("worker.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let worker = tokio::spawn(fake_worker(path));

    let (stream, _) = listener.accept().await.expect("accept");
    let conn = supervisor_accept(stream, TOKEN, Some(std::process::id()), HANDSHAKE_TIMEOUT)
        .await
        .expect("handshake");
    let (mut reader, mut writer) = conn.into_split();
    assert!(matches!(
        reader.read_frame().await,
        Ok(Some(FromWorker::Ready { .. }))
    ));

    let request = samples::generate_request(samples::chat_prompt());
    writer
        .write_frame(&ToWorker::Generate {
            id: 42,
            request: Box::new(request),
        })
        .await
        .expect("send");
    let mut text = String::new();
    let finish = loop {
        match reader
            .read_frame()
            .await
            .expect("decodes")
            .expect("worker still there")
        {
            FromWorker::Accepted {
                id: 42,
                prompt_tokens: 4,
                ..
            } => {}
            FromWorker::Delta {
                id: 42,
                text: piece,
                ..
            } => text.push_str(&piece),
            FromWorker::Done {
                id: 42,
                finish_reason,
                ..
            } => break finish_reason,
            other => panic!("unexpected {}", other.name()),
        }
    };
    assert_eq!((text.as_str(), finish), ("Hello", FinishReason::Stop));

    writer.write_frame(&ToWorker::GetStats).await.expect("send");
    assert!(matches!(
        reader.read_frame().await,
        Ok(Some(FromWorker::Stats(_)))
    ));

    writer.write_frame(&ToWorker::Shutdown).await.expect("send");
    worker.await.expect("worker exits cleanly");
    assert!(reader.read_frame().await.expect("clean end").is_none());
}
