//! `corral-worker serve` as the supervisor drives it: this test plays the supervisor over a real
//! Unix socket, against a real worker process on a generated model.

use std::io::Write;
use std::path::Path;
use std::process::ExitStatus;

use corral_fixture::Arch;
use corral_ipc::{
    EmbedInput, EmbedRequest, FinishReason, FromWorker, GenerateRequest, HandshakeError, Prompt,
    RejectKind, RerankRequest, SupervisorConnection, ToWorker, supervisor_accept,
};
use corral_tests::{PATIENCE, binary, tiny_model};
use tokio::net::{UnixListener, UnixStream};
use tokio::process::{Child, Command};
use tokio::time::timeout;

const TOKEN: &str = "one-time-token-for-this-test";

struct Worker {
    child: Child,
    socket_dir: tempfile::TempDir,
}

impl Worker {
    fn spawn(model: &Path, token: &str) -> (Self, UnixListener) {
        Self::spawn_with(model, token, &[])
    }

    fn spawn_with(model: &Path, token: &str, extra_args: &[&str]) -> (Self, UnixListener) {
        let socket_dir = tempfile::tempdir().unwrap();
        let socket = socket_dir.path().join("worker.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let child = Command::new(binary("corral-worker"))
            .arg("serve")
            .arg("--model")
            .arg(model)
            .arg("--socket")
            .arg(&socket)
            .args(extra_args)
            .env(corral_ipc::WORKER_TOKEN_ENV, token)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        (Self { child, socket_dir }, listener)
    }

    async fn exit(&mut self) -> ExitStatus {
        timeout(PATIENCE, self.child.wait())
            .await
            .expect("worker exits")
            .unwrap()
    }
}

async fn accept(listener: &UnixListener) -> UnixStream {
    timeout(PATIENCE, listener.accept())
        .await
        .unwrap()
        .unwrap()
        .0
}

/// A worker that passed the handshake and reported Ready.
async fn ready_worker(model: &Path) -> (Worker, SupervisorConnection) {
    ready_worker_with(model, &[]).await
}

async fn ready_worker_with(model: &Path, extra_args: &[&str]) -> (Worker, SupervisorConnection) {
    let (worker, listener) = Worker::spawn_with(model, TOKEN, extra_args);
    let stream = accept(&listener).await;
    let mut connection = supervisor_accept(stream, TOKEN, worker.child.id(), PATIENCE)
        .await
        .unwrap();
    match recv(&mut connection).await {
        FromWorker::Ready {
            weight_bytes,
            context_length,
            ..
        } => {
            assert!(weight_bytes > 0);
            assert!(context_length >= 4096);
        }
        other => panic!("expected Ready, got {other:?}"),
    }
    (worker, connection)
}

async fn recv(connection: &mut SupervisorConnection) -> FromWorker {
    timeout(PATIENCE, connection.recv())
        .await
        .expect("a frame in time")
        .unwrap()
        .expect("the connection stays open")
}

fn chat(max_tokens: u32, logprobs: Option<u32>) -> GenerateRequest {
    let prompt = Prompt::Chat {
        messages: vec![serde_json::json!({"role": "user", "content": "Say something."})],
        tools: None,
        template_kwargs: None,
        images: Vec::new(),
    };
    GenerateRequest {
        logprobs,
        ..GenerateRequest::greedy(prompt, max_tokens)
    }
}

async fn stats(connection: &mut SupervisorConnection) -> corral_ipc::WorkerStats {
    connection.send(&ToWorker::GetStats).await.unwrap();
    match recv(connection).await {
        FromWorker::Stats(stats) => stats,
        other => panic!("expected Stats, got {other:?}"),
    }
}

#[tokio::test]
async fn serves_a_generation_then_shuts_down_cleanly() {
    let model = tiny_model(Arch::Qwen3);
    let (mut worker, mut connection) = ready_worker(model.path()).await;
    let request = chat(16, Some(2));
    connection
        .send(&ToWorker::Generate {
            id: 7,
            request: Box::new(request),
        })
        .await
        .unwrap();
    let FromWorker::Accepted {
        id: 7,
        prompt_tokens,
        ..
    } = recv(&mut connection).await
    else {
        panic!("expected Accepted");
    };
    assert!(prompt_tokens > 5);
    let mut tokens_in_deltas = 0;
    let usage = loop {
        match recv(&mut connection).await {
            FromWorker::Delta {
                id: 7,
                token_count,
                logprobs,
                ..
            } => {
                tokens_in_deltas += token_count;
                let logprobs = logprobs.expect("logprobs were asked for");
                assert_eq!(logprobs.len(), token_count as usize);
                assert!(
                    logprobs
                        .iter()
                        .all(|l| l.top_logprobs.len() == 2 && l.logprob <= 0.0)
                );
            }
            FromWorker::Done {
                id: 7,
                finish_reason,
                usage,
                ..
            } => {
                assert_ne!(finish_reason, FinishReason::Cancelled);
                break usage;
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(usage.prompt_tokens, prompt_tokens);
    assert_eq!(usage.completion_tokens, tokens_in_deltas);
    let after = stats(&mut connection).await;
    assert_eq!((after.completed, after.cancelled), (1, 0));
    assert_eq!(after.pid, worker.child.id().unwrap());
    assert!(after.mlx_active_bytes > 0);

    connection.send(&ToWorker::Shutdown).await.unwrap();
    assert!(worker.exit().await.success());
}

#[tokio::test]
async fn counting_a_prompt_answers_its_length_and_generates_nothing() {
    let model = tiny_model(Arch::Qwen3);
    let (_worker, mut connection) = ready_worker(model.path()).await;
    let mut counted = Vec::new();
    for (id, count_only) in [(1, false), (2, true)] {
        let request = corral_ipc::GenerateRequest {
            count_only,
            ..chat(4, None)
        };
        let request = Box::new(request);
        connection
            .send(&ToWorker::Generate { id, request })
            .await
            .unwrap();
        let FromWorker::Accepted { prompt_tokens, .. } = recv(&mut connection).await else {
            panic!("expected Accepted");
        };
        counted.push(prompt_tokens);
        loop {
            match recv(&mut connection).await {
                FromWorker::Delta { .. } => assert!(!count_only, "a count generates nothing"),
                FromWorker::Done { usage, .. } => {
                    assert_eq!(usage.prompt_tokens, prompt_tokens);
                    assert_eq!(usage.completion_tokens == 0, count_only);
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert_eq!(
        counted[0], counted[1],
        "the count is the prompt a generation gets"
    );
}

#[tokio::test]
async fn cancel_ends_the_sequence_and_the_stats_count_it() {
    let model = tiny_model(Arch::Llama);
    let (_worker, mut connection) = ready_worker(model.path()).await;
    connection
        .send(&ToWorker::Generate {
            id: 1,
            request: Box::new(chat(4000, None)),
        })
        .await
        .unwrap();
    let mut cancelled_sent = false;
    let completion_tokens = loop {
        match recv(&mut connection).await {
            FromWorker::Accepted { .. } => {}
            FromWorker::Delta { .. } if !cancelled_sent => {
                connection.send(&ToWorker::Cancel { id: 1 }).await.unwrap();
                cancelled_sent = true;
            }
            FromWorker::Delta { .. } => {}
            FromWorker::Done {
                finish_reason,
                usage,
                ..
            } => {
                assert_eq!(finish_reason, FinishReason::Cancelled);
                break usage.completion_tokens;
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(completion_tokens < 4000);
    let after = stats(&mut connection).await;
    assert_eq!((after.cancelled, after.active_sequences), (1, 0));
}

#[tokio::test]
async fn a_prompt_over_the_context_is_rejected_before_any_token() {
    let model = tiny_model(Arch::Llama);
    let (_worker, mut connection) = ready_worker(model.path()).await;
    let mut request = chat(8, None);
    request.prompt = Prompt::Tokens(vec![5; 9000]);
    connection
        .send(&ToWorker::Generate {
            id: 3,
            request: Box::new(request),
        })
        .await
        .unwrap();
    match recv(&mut connection).await {
        FromWorker::Rejected {
            id: 3,
            kind,
            message,
            ..
        } => {
            assert_eq!(kind, corral_ipc::RejectKind::PromptTooLong);
            assert!(message.contains("9000"), "{message}");
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    // The worker keeps serving.
    connection
        .send(&ToWorker::Generate {
            id: 4,
            request: Box::new(chat(2, None)),
        })
        .await
        .unwrap();
    assert!(matches!(
        recv(&mut connection).await,
        FromWorker::Accepted { id: 4, .. }
    ));
}

/// The tiny Llama fixture holds about 11 MiB of f32 weights. By the guard's estimate a short chat
/// prompt adds about 1.3 MiB at its prefill peak and 2000 tokens add 77.5 MiB (mostly one chunk's
/// attention scores), so 32 MiB admits the first and refuses the second with wide margins, while
/// 2000 tokens stay well inside the 8192-token context and prefill in seconds on a CPU.
const TINY_MEMORY_LIMIT: &str = "33554432";
const LONG_PROMPT_TOKENS: usize = 2000;

fn long_prompt() -> GenerateRequest {
    let mut request = chat(1, None);
    request.prompt = Prompt::Tokens(vec![5; LONG_PROMPT_TOKENS]);
    request
}

/// Sends `request` and reads its frames to `Done`, which must follow an `Accepted`.
async fn run_to_done(connection: &mut SupervisorConnection, id: u64, request: GenerateRequest) {
    connection
        .send(&ToWorker::Generate {
            id,
            request: Box::new(request),
        })
        .await
        .unwrap();
    match recv(connection).await {
        FromWorker::Accepted { id: accepted, .. } => assert_eq!(accepted, id),
        other => panic!("expected Accepted, got {other:?}"),
    }
    loop {
        match recv(connection).await {
            FromWorker::Delta { id: delta, .. } => assert_eq!(delta, id),
            FromWorker::Done { id: done, .. } => break assert_eq!(done, id),
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_prefill_over_the_memory_limit_is_refused_before_any_compute() {
    let model = tiny_model(Arch::Llama);
    let (_worker, mut connection) =
        ready_worker_with(model.path(), &["--memory-limit", TINY_MEMORY_LIMIT]).await;
    let before = stats(&mut connection).await;
    connection
        .send(&ToWorker::Generate {
            id: 1,
            request: Box::new(long_prompt()),
        })
        .await
        .unwrap();
    match recv(&mut connection).await {
        FromWorker::Rejected {
            id: 1,
            kind,
            message,
            ..
        } => {
            assert_eq!(kind, corral_ipc::RejectKind::PrefillMemory);
            // The estimate is the guard's formula for this shape; the memory in use varies.
            for part in [
                "prefill of 2000 prompt tokens needs about 77.5 MiB on top of ",
                " MiB in use, over this worker's memory limit of 32.0 MiB",
            ] {
                assert!(message.contains(part), "{message}");
            }
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    // No sequence ran: nothing counted, and MLX never allocated past its peak from loading.
    let after = stats(&mut connection).await;
    assert_eq!((after.completed, after.cancelled), (0, 0));
    assert_eq!((after.active_sequences, after.queued_requests), (0, 0));
    assert_eq!(after.mlx_peak_bytes, before.mlx_peak_bytes);

    // The worker keeps serving what fits.
    run_to_done(&mut connection, 2, chat(2, None)).await;
    assert_eq!(stats(&mut connection).await.completed, 1);
}

/// With room for one long prefill but not for a second beside the first one's KV cache (8 MiB
/// for 2000 tokens), the second waits in the queue and runs once the first has ended, rather
/// than being refused or running over the limit.
#[tokio::test]
async fn a_prefill_that_fits_alone_but_not_beside_another_waits_for_it() {
    let model = tiny_model(Arch::Llama);
    // The prefix cache's blocks are MLX memory too; without it, an idle worker's memory in use is
    // its weights and nothing else, the same in every worker of this model.
    let loaded = {
        let (_probe, mut connection) =
            ready_worker_with(model.path(), &["--no-prefix-cache"]).await;
        stats(&mut connection).await.mlx_active_bytes
    };
    // The guard's estimate for one 2000-token prefill is 77.5 MiB: 4 MiB to spare alone, 4 MiB
    // short beside the other's reserved cache.
    let limit = (loaded + (81 << 20) + (1 << 19)).to_string();
    let (_worker, mut connection) = ready_worker_with(
        model.path(),
        &["--no-prefix-cache", "--memory-limit", &limit],
    )
    .await;
    for id in [1, 2] {
        connection
            .send(&ToWorker::Generate {
                id,
                request: Box::new(long_prompt()),
            })
            .await
            .unwrap();
    }
    let mut order = Vec::new();
    while order.iter().filter(|(_, what)| *what == "done").count() < 2 {
        match recv(&mut connection).await {
            FromWorker::Accepted { id, .. } => order.push((id, "accepted")),
            FromWorker::Done { id, .. } => order.push((id, "done")),
            FromWorker::Delta { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        order,
        [(1, "accepted"), (1, "done"), (2, "accepted"), (2, "done")]
    );
}

#[tokio::test]
async fn without_a_memory_limit_the_same_long_prompt_is_served() {
    let model = tiny_model(Arch::Llama);
    let (_worker, mut connection) = ready_worker(model.path()).await;
    run_to_done(&mut connection, 1, long_prompt()).await;
    assert_eq!(stats(&mut connection).await.completed, 1);
}

#[tokio::test]
async fn closing_the_connection_ends_the_worker() {
    let model = tiny_model(Arch::Llama);
    let (mut worker, connection) = ready_worker(model.path()).await;
    drop(connection);
    assert!(worker.exit().await.success());
}

#[tokio::test]
async fn a_garbage_frame_closes_the_connection_and_the_worker_exits() {
    let model = tiny_model(Arch::Llama);
    let (mut worker, listener) = Worker::spawn(model.path(), TOKEN);
    let stream = accept(&listener).await.into_std().unwrap();
    let mut raw = stream.try_clone().unwrap();
    let stream = UnixStream::from_std(stream).unwrap();
    let mut connection = supervisor_accept(stream, TOKEN, worker.child.id(), PATIENCE)
        .await
        .unwrap();
    assert!(matches!(
        recv(&mut connection).await,
        FromWorker::Ready { .. }
    ));
    raw.set_nonblocking(false).unwrap();
    raw.write_all(&[0, 0, 0, 5, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1])
        .unwrap();
    assert!(worker.exit().await.success());
    assert!(
        timeout(PATIENCE, connection.recv())
            .await
            .unwrap()
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_model_that_can_never_load_reports_a_permanent_load_failure_and_exits() {
    let missing = tempfile::tempdir().unwrap();
    let (mut worker, listener) = Worker::spawn(&missing.path().join("absent"), TOKEN);
    let stream = accept(&listener).await;
    let mut connection = supervisor_accept(stream, TOKEN, worker.child.id(), PATIENCE)
        .await
        .unwrap();
    match recv(&mut connection).await {
        FromWorker::LoadFailed { message, permanent } => {
            assert!(message.contains("absent"), "{message}");
            assert!(permanent, "{message}");
        }
        other => panic!("expected LoadFailed, got {other:?}"),
    }
    assert_eq!(worker.exit().await.code(), Some(1));
}

#[tokio::test]
async fn a_worker_with_the_wrong_token_is_refused() {
    let model = tiny_model(Arch::Llama);
    let (mut worker, listener) = Worker::spawn(model.path(), "not-the-token");
    let stream = accept(&listener).await;
    let Err(error) = supervisor_accept(stream, TOKEN, worker.child.id(), PATIENCE).await else {
        panic!("a wrong token was accepted");
    };
    assert!(matches!(error, HandshakeError::BadToken), "{error}");
    assert_eq!(worker.exit().await.code(), Some(1));
    assert!(worker.socket_dir.path().exists());
}

#[tokio::test]
async fn an_embedding_worker_embeds_refuses_other_requests_and_reports_its_queue() {
    let model = corral_tests::minilm_model();
    let (mut worker, listener) = Worker::spawn(&model, TOKEN);
    let stream = accept(&listener).await;
    let mut connection = supervisor_accept(stream, TOKEN, worker.child.id(), PATIENCE)
        .await
        .unwrap();
    match recv(&mut connection).await {
        // all-MiniLM-L6-v2's max_seq_length.
        FromWorker::Ready { context_length, .. } => assert_eq!(context_length, 256),
        other => panic!("expected Ready, got {other:?}"),
    }
    let inputs = ["hello world", "a"].map(|text| EmbedInput::Text(text.into()));
    connection
        .send(&ToWorker::Embed {
            id: 1,
            request: EmbedRequest {
                inputs: inputs.to_vec(),
                truncate: false,
                dimensions: None,
                prompt_name: None,
            },
        })
        .await
        .unwrap();
    match recv(&mut connection).await {
        FromWorker::Embeddings {
            id: 1,
            vectors,
            prompt_tokens,
        } => {
            // [CLS] hello world [SEP] and [CLS] a [SEP].
            assert_eq!(prompt_tokens, 7);
            assert_eq!(vectors.iter().map(Vec::len).collect::<Vec<_>>(), [384, 384]);
        }
        other => panic!("expected Embeddings, got {other:?}"),
    }
    connection
        .send(&ToWorker::Generate {
            id: 2,
            request: Box::new(chat(4, None)),
        })
        .await
        .unwrap();
    connection
        .send(&ToWorker::Rerank {
            id: 3,
            request: RerankRequest {
                query: "q".into(),
                documents: vec!["d".into()],
                truncate: false,
            },
        })
        .await
        .unwrap();
    for id in [2, 3] {
        match recv(&mut connection).await {
            FromWorker::Rejected { id: got, kind, .. } => {
                assert_eq!((got, kind), (id, RejectKind::Unsupported));
            }
            other => panic!("expected Rejected, got {other:?}"),
        }
    }
    let stats = stats(&mut connection).await;
    assert_eq!((stats.completed, stats.cancelled), (1, 0));
    assert_eq!((stats.active_sequences, stats.queued_requests), (0, 0));
    assert!(stats.mlx_active_bytes > 0);
    assert!(stats.prefix_cache.is_none());
    connection.send(&ToWorker::Shutdown).await.unwrap();
    assert!(worker.exit().await.success());
}
