//! A worker's life as operators see it, end to end: SIGKILLs from outside under streaming load
//! (the next request simply gets a new worker), the crash-loop backoff of a model whose workers
//! die before they are ready, and a loaded model that keeps serving while another model's frozen
//! worker is being unloaded.
//!
//! Where the order of events matters, a test checks the state the server reports (a worker still
//! stopping, the number of workers spawned), and the times it measures are only printed. One
//! assertion needs the machine to keep a pace: the crash-loop test's last request must reach the
//! server while the backoff that refuses it has more than the admission wait (4 s) left.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use corral_fixture::Arch;
use corral_tests::server::{Dirs, Server, alive, chat, client, sse_events};
use corral_tests::{PATIENCE, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

fn ready_pid(server: &Server, model: &str) -> u32 {
    let row = server.worker_row(model);
    assert_eq!(row["state"], "ready", "{row}");
    row["pid"].as_u64().unwrap() as u32
}

fn signal(pid: u32, signal: Signal) {
    kill(Pid::from_raw(pid as i32), signal).unwrap();
}

/// Streams one chat on `model` to its end and returns its `data:` payloads.
fn stream(server: &Server, model: &str, max_tokens: u32) -> Vec<String> {
    let response = server.post("/v1/chat/completions", &chat(model, max_tokens, true));
    assert_eq!(response.status(), 200);
    sse_events(response).collect()
}

#[test]
fn fifty_sigkills_of_a_streaming_worker_each_get_a_new_worker_and_the_other_model_streams_on() {
    let dirs = Dirs::with_models(&[Arch::Llama, Arch::Qwen3]);
    let server = Arc::new(Server::start(&dirs));
    assert_eq!(stream(&server, "qwen3", 2).last().unwrap(), "[DONE]");
    let done = Arc::new(AtomicBool::new(false));
    let other_model = thread::spawn({
        let (server, done) = (server.clone(), done.clone());
        move || {
            let mut completed = 0;
            while !done.load(Ordering::SeqCst) {
                let events = stream(&server, "qwen3", 16);
                assert_eq!(events.last().unwrap(), "[DONE]", "{events:?}");
                assert!(!events.iter().any(|event| event.contains("\"error\"")));
                completed += 1;
            }
            completed
        }
    });

    let mut killed = HashSet::new();
    for round in 0..50 {
        let response = server.post("/v1/chat/completions", &chat("llama", 500, true));
        assert_eq!(
            response.status(),
            200,
            "round {round}: refused after a kill"
        );
        let mut events = sse_events(response);
        let first = events.next().unwrap();
        assert!(first.contains("\"delta\""), "{first}");
        let pid = ready_pid(&server, "llama");
        assert!(
            killed.insert(pid),
            "round {round}: pid {pid} served again after its kill"
        );
        signal(pid, Signal::SIGKILL);
        let rest: Vec<String> = events.collect();
        let last = rest.last().map_or("", String::as_str);
        assert!(
            last.contains("\"error\"") && !rest.iter().any(|event| event == "[DONE]"),
            "round {round}: a stream cut by a kill must end with an error: {rest:?}"
        );

        let response = server.post("/v1/chat/completions", &chat("llama", 2, false));
        assert_eq!(
            response.status(),
            200,
            "round {round}: refused after a kill"
        );
        assert!(!killed.contains(&ready_pid(&server, "llama")));
    }
    done.store(true, Ordering::SeqCst);
    let completed = other_model.join().unwrap();
    assert!(completed > 0);

    // One worker per model and no leftovers: every killed worker is gone.
    assert_eq!(server.worker_pids().len(), 2, "{:?}", server.worker_pids());
    assert!(killed.iter().all(|&pid| !alive(pid)));
    let llama = server.worker_row("llama");
    assert_eq!(llama["restarts"], 50, "{llama}");
    eprintln!("50 kills: the other model completed {completed} streams meanwhile");
}

#[test]
fn a_request_whose_worker_dies_before_accepting_it_is_served_by_a_new_worker() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = Arc::new(Server::start(&dirs));
    assert_eq!(stream(&server, "llama", 2).last().unwrap(), "[DONE]");
    let frozen = ready_pid(&server, "llama");
    signal(frozen, Signal::SIGSTOP);
    let request = thread::spawn({
        let server = server.clone();
        move || server.post("/v1/chat/completions", &chat("llama", 2, false))
    });
    wait_until(
        "the request to lease the frozen worker, which cannot accept it",
        || server.worker_row("llama")["leases"] == 1,
    );
    signal(frozen, Signal::SIGKILL);

    let response = request.join().unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    assert_ne!(ready_pid(&server, "llama"), frozen);
    assert_eq!(restarts(&server, "llama"), 1);
}

/// Failed starts and unexpected exits of `model`'s workers so far, as the pool counts them.
fn restarts(server: &Server, model: &str) -> u64 {
    server.worker_row(model)["restarts"].as_u64().unwrap()
}

fn error_of(response: reqwest::blocking::Response) -> (u16, u64, String) {
    let status = response.status().as_u16();
    let retry_after = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body: Value = response.json().unwrap();
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    (status, retry_after, message)
}

#[test]
fn a_model_that_dies_before_ready_backs_off_from_its_third_failure_and_requests_wait_when_they_can()
{
    let dirs = Dirs::with_models(&[Arch::Llama]);
    dirs.add_copy("llama", "broken");
    let worker = dirs.worker_killed_loading("broken");
    let config = dirs.write_config("admission_wait_secs = 4\n");
    let server = Server::start_with(
        &dirs,
        &[
            OsStr::new("--config"),
            config.as_os_str(),
            OsStr::new("--worker-binary"),
            worker.as_os_str(),
        ],
    );
    let request = || server.post("/v1/chat/completions", &chat("broken", 2, false));

    // Failures 1 and 2 leave no backoff; 3, 4 and 5 start backoffs of 1, 2 and 4 s, none longer
    // than the 4 s wait, so requests 4 to 6 wait them out and try (and fail) again.
    for attempt in 1..=6 {
        let (status, retry_after, message) = error_of(request());
        assert_eq!(status, 503, "{message}");
        assert!(
            message.contains("could not start"),
            "attempt {attempt}: {message}"
        );
        assert!(retry_after >= 1);
        assert_eq!(restarts(&server, "broken"), attempt);
    }
    // Failure 6 started a backoff of 8 s, longer than the wait: refused at once, nothing started.
    let (status, retry_after, message) = error_of(request());
    assert_eq!(status, 503);
    assert!(
        message.contains("crash-looping (6 failures in a row"),
        "{message}"
    );
    assert!((4..=8).contains(&retry_after), "Retry-After {retry_after}");
    assert_eq!(restarts(&server, "broken"), 6);
    assert_eq!(server.worker_row("broken")["state"], "failed");

    let response = server.post("/v1/chat/completions", &chat("llama", 2, false));
    assert_eq!(response.status(), 200);
}

/// Time to the first streamed token of a chat on `model`.
fn time_to_first_token(server: &Server, model: &str) -> Duration {
    let started = Instant::now();
    let response = server.post("/v1/chat/completions", &chat(model, 8, true));
    assert_eq!(response.status(), 200);
    let mut events = sse_events(response);
    let first = events.next().unwrap();
    let elapsed = started.elapsed();
    assert!(first.contains("\"delta\""), "{first}");
    assert_eq!(events.last().unwrap(), "[DONE]");
    elapsed
}

fn median_ms(server: &Server, model: &str) -> f64 {
    let mut times: Vec<f64> = (0..7)
        .map(|_| time_to_first_token(server, model).as_secs_f64() * 1e3)
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

#[test]
fn a_loaded_model_serves_at_its_usual_speed_while_a_frozen_worker_is_unloaded() {
    let dirs = Dirs::with_models(&[Arch::Llama, Arch::Qwen2, Arch::Qwen3]);
    // A frozen worker stays stopping for a grace period before SIGTERM: as long as the test's
    // patience, so that it is still stopping when the other models have served, however slowly.
    let config = dirs.write_config(&format!(
        "worker_stop_grace_secs = {}\n",
        PATIENCE.as_secs()
    ));
    let server = Arc::new(Server::start_with(
        &dirs,
        &[OsStr::new("--config"), config.as_os_str()],
    ));
    for model in ["llama", "qwen3"] {
        assert_eq!(stream(&server, model, 2).last().unwrap(), "[DONE]");
    }
    let before = median_ms(&server, "qwen3");

    // llama's worker freezes; its unload waits for it to act on `Shutdown`.
    let frozen = ready_pid(&server, "llama");
    signal(frozen, Signal::SIGSTOP);
    let unload = thread::spawn({
        let server = server.clone();
        move || {
            client()
                .post(server.url("/v1/models/llama/unload"))
                .send()
                .unwrap()
                .status()
        }
    });
    wait_until("llama to be stopping", || {
        server.worker_row("llama")["state"] == "stopping"
    });

    let third = Instant::now();
    assert_eq!(stream(&server, "qwen2", 2).last().unwrap(), "[DONE]");
    let third_ms = third.elapsed().as_secs_f64() * 1e3;
    let during = median_ms(&server, "qwen3");
    // All of that happened while the frozen worker was still being stopped.
    assert_eq!(server.worker_row("llama")["state"], "stopping");
    assert!(alive(frozen));

    // Thawed, the worker reads its `Shutdown` and exits.
    signal(frozen, Signal::SIGCONT);
    assert_eq!(unload.join().unwrap(), 200);
    assert!(!alive(frozen));
    eprintln!(
        "loaded model's time to first token: {before:.1} ms before, {during:.1} ms during \
         the frozen unload; a third model started and answered in {third_ms:.1} ms"
    );
}
