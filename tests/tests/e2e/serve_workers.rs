//! `corral serve` end to end, around worker processes that misbehave or are looked at: a worker
//! that never becomes ready, one that finds its model's files can never load, a stranger writing
//! garbage to a worker socket, a worker's own counters through the admin API, and token log
//! probabilities relayed from the worker.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use corral_fixture::Arch;
use corral_ipc::ToWorker;
use corral_tests::server::{Dirs, Server, chat, client, client_outlasting, sse_events};
use corral_tests::{PATIENCE, binary, wait_until};
use serde_json::{Value, json};

/// The worker sockets the supervisor is listening on right now.
fn sockets(state_dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(state_dir.join("run"))
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "sock"))
                .collect()
        })
        .unwrap_or_default()
}

/// The start timeout of the test below. No worker there has to start within it, only the hung
/// one to outlast it, so it can be short on any machine.
const START_TIMEOUT: Duration = Duration::from_secs(2);

#[test]
fn a_worker_that_never_becomes_ready_is_killed_at_the_start_timeout() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    let config = dirs.write_config(&format!(
        "worker_start_timeout_secs = {}\n",
        START_TIMEOUT.as_secs()
    ));
    let server = Server::start_with(&dirs, &[OsStr::new("--config"), config.as_os_str()]);
    // A real worker that blocks forever in its model load: opening a FIFO waits for a writer.
    // Made once the server has described its models, which would wait on it too.
    let weights = dirs.models.path().join("qwen3/model.safetensors");
    std::fs::remove_file(&weights).unwrap();
    nix::unistd::mkfifo(&weights, nix::sys::stat::Mode::S_IRWXU).unwrap();

    let started = Instant::now();
    let response = client_outlasting(START_TIMEOUT)
        .post(server.url("/v1/chat/completions"))
        .json(&chat("qwen3", 2, false))
        .send()
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    let expected = format!("did not become ready within {}", START_TIMEOUT.as_secs());
    assert!(message.contains(&expected), "{message}");
    assert!(started.elapsed() >= START_TIMEOUT);
    // The hung worker was killed and reaped, not left behind.
    assert!(
        server.worker_pids().is_empty(),
        "{:?}",
        server.worker_pids()
    );
    assert_eq!(server.worker_row("qwen3")["state"], "failed");
}

/// The status and the `error` object of an answer, and whether it says when to retry.
fn refusal(response: reqwest::blocking::Response) -> (u16, bool, Value) {
    let status = response.status().as_u16();
    let retry = response.headers().contains_key("retry-after");
    let body: Value = response.json().unwrap();
    (status, retry, body)
}

/// Each API's first request for a model that passes `describe` but whose files lack a tensor
/// starts its one worker and gets the worker's reason as a 400 in that API's shape; from then on
/// the model is listed as unservable and refused before any worker starts.
#[test]
fn a_model_whose_files_cannot_load_is_refused_as_unservable_in_each_apis_shape_and_listed() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let mut reasons = Vec::new();
    for name in ["broken", "broken-too"] {
        let path = dirs.add_copy_without_tensor("llama", name, "model.norm.weight");
        reasons.push(format!(
            "{}: tensor model.norm.weight is missing",
            path.display()
        ));
    }
    let server = Server::start(&dirs);
    let messages = |model: &str| json!({"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]});

    for _ in 0..2 {
        let (status, retry, body) =
            refusal(server.post("/v1/chat/completions", &chat("broken", 2, false)));
        assert_eq!((status, retry), (400, false), "{body}");
        let error = &body["error"];
        assert_eq!(error["code"], "model_not_servable", "{body}");
        assert_eq!(error["type"], "invalid_request_error", "{body}");
        assert!(
            error["message"].as_str().unwrap().contains(&reasons[0]),
            "{body}"
        );
    }
    let (status, retry, body) = refusal(server.post("/v1/messages", &messages("broken")));
    assert_eq!((status, retry), (400, false), "{body}");
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&reasons[0]),
        "{body}"
    );
    for _ in 0..2 {
        let (status, retry, body) = refusal(server.post("/v1/messages", &messages("broken-too")));
        assert_eq!((status, retry), (400, false), "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&reasons[1]),
            "{body}"
        );
    }
    // One start each, by the first request; the later ones started none.
    for name in ["broken", "broken-too"] {
        let row = server.worker_row(name);
        assert_eq!(
            (row["restarts"].as_u64(), &row["state"]),
            (Some(1), &json!("failed")),
            "{row}"
        );
    }
    assert!(server.worker_pids().is_empty());

    let status = server.get_json("/v1/models/status");
    for (name, reason) in ["broken", "broken-too"].into_iter().zip(&reasons) {
        let row = status["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["id"] == name)
            .unwrap();
        assert_eq!(row["unservable"], reason.as_str(), "{row}");
    }
    let listed: Vec<Value> = server.get_json("/v1/models")["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|model| model["id"].clone())
        .collect();
    assert_eq!(listed, [json!("llama")]);
    let answered = server.post("/v1/chat/completions", &chat("llama", 2, false));
    assert_eq!(answered.status(), 200);
}

/// A worker executable that becomes the real worker only once the file `go` exists, which keeps
/// the worker socket open until the test has been there first, however long that takes. It
/// gives up if its parent (corral) is gone, so a failed test leaves no loop behind. Only `serve`
/// is held: `describe`, which corral runs before it listens, goes through at once.
fn held_worker(dir: &Path, go: &Path) -> PathBuf {
    let script = dir.join("held-worker.sh");
    let worker = binary("corral-worker");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             while [ \"$1\" = serve ] && [ ! -e '{}' ]; do\n\
               kill -0 $PPID 2>/dev/null || exit 1; sleep 0.05\n\
             done\n\
             exec '{}' \"$@\"\n",
            go.display(),
            worker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[test]
fn garbage_written_to_a_worker_socket_is_refused_and_the_worker_still_starts() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let go = dirs.state.path().join("go");
    let script = held_worker(dirs.state.path(), &go);
    let server = Server::start_with(&dirs, &[OsStr::new("--worker-binary"), script.as_os_str()]);
    let base = server.url("");
    let request = thread::spawn(move || {
        client()
            .post(format!("{base}/v1/chat/completions"))
            .json(&chat("llama", 2, false))
            .send()
            .unwrap()
            .status()
    });

    let deadline = Instant::now() + PATIENCE;
    let socket = loop {
        if let Some(socket) = sockets(&server.state_dir).pop() {
            break socket;
        }
        assert!(Instant::now() < deadline, "no worker socket appeared");
        thread::sleep(Duration::from_millis(10));
    };
    let mut stranger = UnixStream::connect(&socket).unwrap();
    stranger.set_read_timeout(Some(PATIENCE)).unwrap();
    // A frame header announcing 5 bytes, then bytes that are no MessagePack message.
    stranger
        .write_all(b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1")
        .unwrap();
    let mut answer = Vec::new();
    stranger.read_to_end(&mut answer).unwrap();
    let (refusal, _) = corral_ipc::decode_frame::<ToWorker>(&answer)
        .unwrap()
        .expect("a whole frame");
    let ToWorker::Refused { message } = refusal else {
        panic!("expected Refused, got {refusal:?}");
    };
    assert!(message.contains("pid"), "{message}");

    // The real worker connects after the stranger was turned away, and serves.
    std::fs::write(&go, "").unwrap();
    assert_eq!(request.join().unwrap(), 200);
    assert_eq!(server.worker_pids().len(), 1);
    // Once the worker is in, its socket is gone: nobody else can connect.
    assert!(sockets(&server.state_dir).is_empty());
}

#[test]
fn a_disconnected_stream_shows_as_cancelled_in_the_workers_own_stats() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = Server::start(&dirs);
    let mut events = sse_events(server.post("/v1/chat/completions", &chat("llama", 4000, true)));
    events.next().unwrap();
    // The worker publishes its batch after each step, so the stream shows there a step later.
    wait_until("the stream is the worker's one active sequence", || {
        server.worker_row("llama")["stats"]["active_sequences"] == 1
    });
    let busy = server.worker_row("llama");
    assert_eq!(busy["state"], "ready");
    assert_eq!(busy["leases"], 1);
    drop(events);

    // The next request runs beside the abandoned one while that one ends in the worker.
    assert_eq!(
        server
            .post("/v1/chat/completions", &chat("llama", 2, false))
            .status(),
        200
    );
    wait_until("the abandoned stream has ended in the worker", || {
        let row = server.worker_row("llama");
        row["leases"] == 0 && row["stats"]["cancelled"] == 1
    });
    let row = server.worker_row("llama");
    assert_eq!(row["pid"], server.worker_pids()[0]);
    let stats = &row["stats"];
    assert_eq!(stats["cancelled"], 1, "{row}");
    assert_eq!(stats["completed"], 1, "{row}");
    assert_eq!(stats["active_sequences"], 0, "{row}");
    assert_eq!(stats["queued_requests"], 0, "{row}");
    assert!(stats["resident_bytes"].as_u64().unwrap() > 0, "{row}");
}

#[test]
fn logprobs_come_through_in_both_openai_shapes() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    let server = Server::start(&dirs);
    let mut request = chat("qwen3", 4, false);
    request["logprobs"] = json!(true);
    request["top_logprobs"] = json!(3);
    let body: Value = server
        .post("/v1/chat/completions", &request)
        .json()
        .unwrap();
    let content = body["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(
        content.len() as u64,
        body["usage"]["completion_tokens"].as_u64().unwrap(),
        "{body}"
    );
    for token in content {
        let logprob = token["logprob"].as_f64().unwrap();
        let top = token["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3, "{token}");
        // Greedy decoding: the chosen token is the most likely one.
        assert!(
            (top[0]["logprob"].as_f64().unwrap() - logprob).abs() < 1e-4,
            "{token}"
        );
        assert!(logprob <= 0.0);
    }

    request["stream"] = json!(true);
    let streamed: Vec<Value> = sse_events(server.post("/v1/chat/completions", &request))
        .filter(|event| event != "[DONE]")
        .map(|event| serde_json::from_str(&event).unwrap())
        .collect();
    let streamed_tokens: Vec<&Value> = streamed
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["logprobs"]["content"].as_array())
        .flatten()
        .collect();
    assert_eq!(streamed_tokens.len(), content.len());
    for (streamed, whole) in streamed_tokens.iter().zip(content) {
        assert_eq!(streamed["token"], whole["token"]);
    }

    let body: Value = server
        .post(
            "/v1/completions",
            &json!({"model": "qwen3", "prompt": "Once", "max_tokens": 3, "temperature": 0, "logprobs": 2}),
        )
        .json()
        .unwrap();
    let logprobs = &body["choices"][0]["logprobs"];
    let tokens = logprobs["tokens"].as_array().unwrap();
    assert_eq!(
        logprobs["token_logprobs"].as_array().unwrap().len(),
        tokens.len()
    );
    // Up to 2: two token ids can share one text, and a map keeps only one of them.
    let top = logprobs["top_logprobs"][0].as_object().unwrap();
    assert!((1..=2).contains(&top.len()), "{body}");
    assert_eq!(logprobs["text_offset"][0], 0, "{body}");
}
