//! `corral serve` end to end under a memory budget: swaps between models that do not fit
//! together, a leased worker that must not be evicted, idle timeouts and pinned models.

use std::ffi::OsStr;
use std::thread;

use corral_fixture::{Arch, Size};
use corral_tests::server::{Dirs, Server, alive, chat, client_outlasting, sse_events};
use corral_tests::{PATIENCE, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

/// Holds one `small` fixture worker (about 400 MiB resident, estimated at about 410 MiB) but
/// not two.
const ONE_SMALL_MODEL: &str = "600MiB";

fn evictions(server: &Server) -> Vec<Value> {
    server.get_json("/admin/memory")["recent_evictions"]
        .as_array()
        .unwrap()
        .clone()
}

/// The index of the first log line containing every one of `parts`.
fn log_index(lines: &[String], parts: &[&str]) -> Option<usize> {
    lines
        .iter()
        .position(|line| parts.iter().all(|part| line.contains(part)))
}

#[test]
fn alternating_models_that_fit_one_at_a_time_swap_and_each_old_worker_is_reaped_first() {
    let dirs = Dirs::with_shared_weights(Size::Small, &["alpha", "beta"]);
    let server = Server::start_with(
        &dirs,
        &[OsStr::new("--memory-ceiling"), OsStr::new(ONE_SMALL_MODEL)],
    );
    let order = ["alpha", "beta", "alpha", "beta"];
    let mut previous_pid: Option<u64> = None;
    for (swaps, model) in order.into_iter().enumerate() {
        let response = server.post("/v1/chat/completions", &chat(model, 2, false));
        assert_eq!(response.status(), 200, "{model}");
        let workers = server.worker_pids();
        assert_eq!(workers.len(), 1, "{model}: {workers:?}");
        let evictions = evictions(&server);
        assert_eq!(evictions.len(), swaps, "{evictions:?}");
        if let Some(last) = evictions.last() {
            assert_eq!(last["reason"], "evicted");
            assert_eq!(last["step"], "graceful");
            let pid = last["pid"].as_u64().unwrap();
            assert_eq!(Some(pid), previous_pid);
            assert!(!alive(pid as u32));
            assert!(last["freed_bytes"].as_u64().unwrap() > 100 << 20, "{last}");
            // The stop was logged once the old process was reaped, before the new one spawned.
            let lines = server.log_lines();
            let reaped = log_index(&lines, &["worker stopped", &format!("pid={pid}")]).unwrap();
            let spawned =
                log_index(&lines, &["worker spawned", &format!("pid={}", workers[0])]).unwrap();
            assert!(
                reaped < spawned,
                "reaped at line {reaped}, spawned at {spawned}"
            );
        }
        previous_pid = Some(u64::from(workers[0]));
    }
}

#[test]
fn a_streaming_worker_is_never_evicted_and_without_an_admission_wait_the_other_model_gets_507() {
    let dirs = Dirs::with_shared_weights(Size::Small, &["alpha", "beta"]);
    let server = Server::start_with(
        &dirs,
        &[
            OsStr::new("--memory-ceiling"),
            OsStr::new(ONE_SMALL_MODEL),
            OsStr::new("--admission-wait"),
            OsStr::new("0"),
        ],
    );
    let mut stream = sse_events(server.post("/v1/chat/completions", &chat("alpha", 60, true)));
    stream.next().unwrap();
    let streaming = server.worker_pids();
    assert_eq!(streaming.len(), 1);

    for _ in 0..2 {
        let response = server.post("/v1/chat/completions", &chat("beta", 2, false));
        assert_eq!(response.status(), 507);
        let body: Value = response.json().unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("beta") && message.contains("600.0 MiB"),
            "{message}"
        );
        assert_eq!(body["error"]["code"], "insufficient_memory");
        assert!(alive(streaming[0]));
    }
    assert!(evictions(&server).is_empty());
    assert_eq!(stream.last().as_deref(), Some("[DONE]"));

    let response = server.post("/v1/chat/completions", &chat("beta", 2, false));
    assert_eq!(response.status(), 200);
    assert!(!alive(streaming[0]));
    assert_eq!(evictions(&server).len(), 1);
}

#[test]
fn with_an_admission_wait_the_other_model_waits_for_the_stream_to_end_and_is_served() {
    let dirs = Dirs::with_shared_weights(Size::Small, &["alpha", "beta"]);
    // Longer than any stream here takes, however busy the machine (the default, 30 s, is not:
    // a 60-token stream of the small model can take longer on a machine that is also compiling).
    let admission_wait = PATIENCE;
    let server = Server::start_with(
        &dirs,
        &[
            OsStr::new("--memory-ceiling"),
            OsStr::new(ONE_SMALL_MODEL),
            OsStr::new("--admission-wait"),
            OsStr::new(&admission_wait.as_secs().to_string()),
        ],
    );
    let mut stream = sse_events(server.post("/v1/chat/completions", &chat("alpha", 60, true)));
    stream.next().unwrap();
    let streaming = server.worker_pids();
    assert_eq!(streaming.len(), 1);

    let waited = thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            client_outlasting(admission_wait)
                .post(server.url("/v1/chat/completions"))
                .json(&chat("beta", 2, false))
                .send()
                .expect("the server answers within the admission wait")
        });
        wait_until("beta to wait for room", || {
            log_index(&server.log_lines(), &["waiting for room to load", "beta"]).is_some()
        });
        assert!(evictions(&server).is_empty());
        // The stream runs to its end, untouched, while beta waits.
        let rest: Vec<String> = stream.collect();
        assert_eq!(rest.last().map(String::as_str), Some("[DONE]"), "{rest:?}");
        waiting.join().unwrap()
    });
    assert_eq!(waited.status(), 200);
    let evictions = evictions(&server);
    assert_eq!(evictions.len(), 1, "{evictions:?}");
    assert_eq!(evictions[0]["pid"], u64::from(streaming[0]));
    assert!(!alive(streaming[0]));
}

#[test]
fn idle_workers_stop_after_their_timeout_while_a_pinned_one_starts_at_once_and_comes_back() {
    let dirs = Dirs::with_models(&[Arch::Llama, Arch::Qwen3]);
    let server = Server::start_with(
        &dirs,
        &[
            OsStr::new("--idle-timeout"),
            OsStr::new("1"),
            OsStr::new("--pin"),
            OsStr::new("qwen3"),
        ],
    );
    let pinned_pid = || {
        let row = server.get_json("/admin/workers")["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["model"] == "qwen3")
            .cloned()
            .unwrap();
        (row["state"] == "ready").then(|| row["pid"].as_u64().unwrap() as u32)
    };
    wait_until("the pinned model to start on its own", || {
        pinned_pid().is_some()
    });

    assert_eq!(
        server
            .post("/v1/chat/completions", &chat("llama", 2, false))
            .status(),
        200
    );
    wait_until("llama's idle timeout", || {
        evictions(&server)
            .iter()
            .any(|eviction| eviction["model"] == "llama" && eviction["reason"] == "idle")
    });
    assert_eq!(server.worker_pids().len(), 1);

    // The pinned worker outlives the timeout, and a crash brings it back without a request.
    let first = pinned_pid().unwrap();
    kill(Pid::from_raw(first as i32), Signal::SIGKILL).unwrap();
    wait_until("the pinned model to restart", || {
        pinned_pid().is_some_and(|pid| pid != first)
    });
    assert!(
        evictions(&server)
            .iter()
            .all(|eviction| eviction["model"] != "qwen3")
    );
}

#[test]
fn a_prompt_whose_prefill_does_not_fit_the_workers_share_gets_413_with_the_numbers() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    // Room for the tiny model (about 40 MiB resident) and short prompts, not for the
    // attention scores of a 6000-token prefill.
    let server = Server::start_with(
        &dirs,
        &[OsStr::new("--memory-ceiling"), OsStr::new("128MiB")],
    );
    let long = serde_json::json!({
        "model": "llama", "prompt": "word ".repeat(3000), "max_tokens": 2,
    });
    let response = server.post("/v1/completions", &long);
    assert_eq!(response.status(), 413);
    let body: Value = response.json().unwrap();
    assert_eq!(body["error"]["code"], "prompt_too_large_for_memory");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("prompt tokens needs about") && message.contains("128.0 MiB"),
        "{message}"
    );
    let stats = &server.get_json("/admin/workers")["data"][0]["stats"];
    assert_eq!(stats["completed"], 0, "{stats}");
    assert_eq!(
        server
            .post("/v1/chat/completions", &chat("llama", 2, false))
            .status(),
        200
    );
}
