//! `GET /metrics` end to end: the exposition parses, line by line, as Prometheus text, and its
//! counters move as requests flow, an idle worker is evicted and a worker is killed; a worker's
//! batch and queue show as gauges while streams run and wait.

use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use corral_fixture::Arch;
use corral_tests::PATIENCE;
use corral_tests::server::{Dirs, Server, chat, client, sse_events};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use prometheus_parse::{LineInfo, Scrape, Value};
use serde_json::Value as Json;

const CHAT: &str = "/v1/chat/completions";

/// Scrapes `/metrics`, insisting that every line is a sample, a HELP/TYPE/UNIT comment or the
/// closing `# EOF`, and that the body parses.
fn scrape(server: &Server) -> Scrape {
    let response = client().get(server.url("/metrics")).send().unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = response.text().unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    for line in text.lines() {
        let known_comment = ["# HELP ", "# TYPE ", "# UNIT ", "# EOF"]
            .iter()
            .any(|prefix| line.starts_with(prefix));
        let sample = matches!(LineInfo::parse(line), LineInfo::Sample { .. });
        assert!(known_comment || sample, "unparsed line: {line}");
    }
    Scrape::parse(text.lines().map(|line| Ok(line.to_owned()))).unwrap()
}

/// The sum of the samples named `name` that carry every one of `labels`; 0 when there are none
/// (a family's series appear on first use).
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|sample| sample.metric == name)
        .filter(|sample| {
            labels
                .iter()
                .all(|(key, value)| sample.labels.get(key) == Some(value))
        })
        .map(|sample| match sample.value {
            Value::Counter(value) | Value::Gauge(value) | Value::Untyped(value) => value,
            ref other => panic!("{name} is not a scalar: {other:?}"),
        })
        .sum()
}

/// Scrapes until `done` holds for a scrape (metrics of a response are recorded once its body
/// has been sent, so a client can see the body first); returns that scrape.
fn wait_for(server: &Server, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let scrape = scrape(server);
        if done(&scrape) {
            return scrape;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// The usage of a whole chat completion, or of a stream's usage chunk.
fn usage(server: &Server, stream: bool) -> Json {
    let response = server.post(CHAT, &chat("llama", 6, stream));
    assert_eq!(response.status(), 200);
    if !stream {
        return response.json::<Json>().unwrap()["usage"].clone();
    }
    sse_events(response)
        .filter(|data| data != "[DONE]")
        .map(|data| serde_json::from_str::<Json>(&data).unwrap())
        .find_map(|chunk| chunk.get("usage").filter(|usage| !usage.is_null()).cloned())
        .expect("a usage chunk")
}

#[test]
fn requests_tokens_and_a_killed_worker_move_their_counters() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = Server::start(&dirs);
    let before = scrape(&server);
    let ok = [("route", CHAT), ("model", "llama"), ("status", "200")];
    let requests = |scrape: &Scrape| value(scrape, "corral_http_requests_total", &ok);
    assert_eq!(requests(&before), 0.0);
    assert_eq!(
        value(
            &before,
            "corral_worker_state",
            &[("model", "llama"), ("state", "not_running")]
        ),
        1.0
    );

    let usages = [
        usage(&server, false),
        usage(&server, true),
        usage(&server, false),
    ];
    let missing = server.post(CHAT, &chat("no-such-model", 6, false));
    assert_eq!(missing.status(), 404);
    drop(missing);

    let after = wait_for(&server, "three requests and a 404", |scrape| {
        requests(scrape) == 3.0
            && value(
                scrape,
                "corral_http_requests_total",
                &[("route", CHAT), ("model", "unknown"), ("status", "404")],
            ) == 1.0
    });
    let llama = [("model", "llama")];
    let total = |field: &str| -> f64 {
        usages
            .iter()
            .map(|usage| usage[field].as_u64().unwrap() as f64)
            .sum()
    };
    assert_eq!(
        value(&after, "corral_prompt_tokens_total", &llama),
        total("prompt_tokens")
    );
    let generated = total("completion_tokens");
    assert!(generated > 0.0);
    assert_eq!(
        value(&after, "corral_generated_tokens_total", &llama),
        generated
    );
    let answered = usages
        .iter()
        .filter(|usage| usage["completion_tokens"].as_u64().unwrap() > 0)
        .count() as f64;
    assert_eq!(
        value(&after, "corral_time_to_first_token_seconds_count", &llama),
        answered
    );
    let timed = [("route", CHAT), ("model", "llama")];
    assert_eq!(
        value(&after, "corral_http_request_duration_seconds_count", &timed),
        3.0
    );
    assert_eq!(value(&after, "corral_queue_depth", &llama), 0.0);
    assert_eq!(
        value(
            &after,
            "corral_worker_state",
            &[("model", "llama"), ("state", "ready")]
        ),
        1.0
    );
    assert!(value(&after, "corral_worker_footprint_bytes", &llama) > 0.0);

    let workers = server.worker_pids();
    assert_eq!(workers.len(), 1, "{workers:?}");
    kill(Pid::from_raw(workers[0] as i32), Signal::SIGKILL).unwrap();
    let killed = [("model", "llama"), ("cause", "signal_9")];
    wait_for(&server, "the kill counted", |scrape| {
        value(scrape, "corral_worker_exits_total", &killed) == 1.0
            && value(scrape, "corral_worker_restarts_total", &llama) == 1.0
    });
}

#[test]
fn an_idle_eviction_counts_its_reason_freed_bytes_duration_and_the_stop() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = Server::start_with(&dirs, &[OsStr::new("--idle-timeout"), OsStr::new("1")]);
    let response = server.post(CHAT, &chat("llama", 2, false));
    assert_eq!(response.status(), 200);
    drop(response);

    let idle = [("reason", "idle")];
    let stopped = [("model", "llama"), ("cause", "stopped")];
    let after = wait_for(&server, "the idle eviction", |scrape| {
        value(scrape, "corral_evictions_total", &idle) == 1.0
            && value(scrape, "corral_worker_exits_total", &stopped) == 1.0
            && value(
                scrape,
                "corral_worker_state",
                &[("model", "llama"), ("state", "not_running")],
            ) == 1.0
    });
    assert!(value(&after, "corral_eviction_freed_bytes_total", &idle) > 0.0);
    assert_eq!(
        value(&after, "corral_eviction_duration_seconds_count", &idle),
        1.0
    );
    assert_eq!(
        value(
            &after,
            "corral_worker_restarts_total",
            &[("model", "llama")]
        ),
        0.0
    );
    assert_eq!(
        value(
            &after,
            "corral_worker_footprint_bytes",
            &[("model", "llama")]
        ),
        0.0
    );
    assert_eq!(
        value(&after, "corral_evictions_total", &[("reason", "evicted")]),
        0.0
    );
}

#[test]
fn a_one_sequence_batch_shows_one_active_and_two_queued_then_empty_once_clients_leave() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let config = dirs.write_config("[models.llama]\nmax_sequences = 1\n");
    let server = Server::start_with(&dirs, &[OsStr::new("--config"), config.as_os_str()]);
    // Three long streams; each client leaves at its first event after `leave` (a waiting one
    // once its turn came), so they end one after the other however the worker orders them.
    let leave = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let (url, leave) = (server.url(CHAT), leave.clone());
            thread::spawn(move || {
                let response = client()
                    .post(url)
                    .json(&chat("llama", 4000, true))
                    .send()
                    .unwrap();
                assert_eq!(response.status(), 200);
                for _ in sse_events(response) {
                    if leave.load(Ordering::Relaxed) {
                        return;
                    }
                }
            })
        })
        .collect();

    let llama = [("model", "llama")];
    let active = |scrape: &Scrape| value(scrape, "corral_worker_active_sequences", &llama);
    let queued = |scrape: &Scrape| value(scrape, "corral_worker_queued_requests", &llama);
    wait_for(
        &server,
        "one sequence in the batch and two queued",
        |scrape| (active(scrape), queued(scrape)) == (1.0, 2.0),
    );

    leave.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let after = wait_for(&server, "an empty batch and queue", |scrape| {
        (active(scrape), queued(scrape)) == (0.0, 0.0)
    });
    // The same worker, still ready, reports them: the zeros are not a missing series.
    let ready = [("model", "llama"), ("state", "ready")];
    assert_eq!(value(&after, "corral_worker_state", &ready), 1.0);
    let text = server.metrics();
    for line in [
        r#"corral_worker_active_sequences{model="llama"} 0"#,
        r#"corral_worker_queued_requests{model="llama"} 0"#,
    ] {
        assert!(text.lines().any(|got| got == line), "{line} in\n{text}");
    }
    assert_eq!(server.worker_pids().len(), 1);
}
