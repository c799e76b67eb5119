//! `corral serve` as a child process for this bench, and the calls it makes over HTTP on
//! 127.0.0.1: load a model, kill its worker, read the worker's prefix cache counters, and time a
//! streamed chat request to its first token.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use corral_ipc::PrefixCacheStats;
use corral_tests::server::sse_events;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use super::{PATIENCE, built_binary};

/// `corral serve` with its default prefix cache (SSD tier under `<state>/kv-cache`), stopped
/// (SIGTERM, which stops its workers, then SIGKILL) and reaped when dropped, panics included.
pub struct Corral {
    child: Child,
    base: String,
    http: reqwest::blocking::Client,
}

/// Which SSE event ended the time to first token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FirstEvent {
    /// The first chunk whose `choices[0].delta.content` is not empty.
    Content,
    /// The usage chunk, when the one token decoded to no text.
    Usage,
}

/// One streamed request with `max_tokens` 1.
pub struct FirstToken {
    pub elapsed: Duration,
    pub ended_by: FirstEvent,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
}

impl Corral {
    pub fn start(models: &Path, state: &Path) -> Self {
        let mut child = Command::new(built_binary("corral"))
            .args(["serve", "--port", "0", "--drain-timeout", "5"])
            .arg("--models-dir")
            .arg(models)
            .arg("--state-dir")
            .arg(state)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning corral serve");
        let stderr = child.stderr.take().expect("corral's piped stderr");
        let address = listening_address(stderr);
        let http = reqwest::blocking::Client::builder()
            .timeout(PATIENCE)
            // A proxy from the environment must not see (or slow down) loopback traffic.
            .no_proxy()
            .build()
            .expect("building the HTTP client");
        Self {
            child,
            base: format!("http://{address}"),
            http,
        }
    }

    fn post(&self, path: &str, body: &Value) -> reqwest::blocking::Response {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .unwrap_or_else(|error| panic!("POST {path}: {error}"));
        let status = response.status();
        assert!(
            status.is_success(),
            "POST {path}: corral answered {status}: {}",
            response.text().unwrap_or_default()
        );
        response
    }

    /// Starts the model's worker if it is not running; returns once it is ready.
    pub fn load(&self, model: &str) {
        self.post(&format!("/v1/models/{model}/load"), &json!({}));
    }

    /// SIGKILLs the model's worker; returns once it is reaped.
    pub fn kill(&self, model: &str) {
        self.post(&format!("/admin/workers/{model}/kill"), &json!({}));
    }

    /// The ready worker's prefix cache counters, from `GET /admin/workers`.
    pub fn prefix_stats(&self, model: &str) -> PrefixCacheStats {
        let workers: Value = self
            .http
            .get(format!("{}/admin/workers", self.base))
            .send()
            .expect("GET /admin/workers")
            .json()
            .expect("GET /admin/workers answers JSON");
        let row = workers["data"]
            .as_array()
            .and_then(|rows| rows.iter().find(|row| row["model"] == model))
            .unwrap_or_else(|| panic!("no row for {model} in {workers}"));
        serde_json::from_value(row["stats"]["prefix_cache"].clone())
            .unwrap_or_else(|error| panic!("{model} has no prefix cache counters ({error}): {row}"))
    }

    /// Waits until the SSD writer's backlog is empty and it has taken at least `enqueued` saves.
    pub fn wait_for_ssd_writer(&self, model: &str, enqueued: u64) -> PrefixCacheStats {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let stats = self.prefix_stats(model);
            let settled = stats.saves_persisted + stats.save_drops;
            if stats.saves_enqueued >= enqueued && stats.saves_enqueued == settled {
                return stats;
            }
            assert!(
                Instant::now() < deadline,
                "{model}: the SSD writer did not catch up: {stats:?}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// A streamed chat request with one user message and `max_tokens` 1, timed from sending it
    /// to the first chunk with content, or to the usage chunk when the token decodes to no text.
    /// The rest of the stream is read to `[DONE]` untimed.
    pub fn first_token(&self, model: &str, content: &str) -> FirstToken {
        let body = json!({
            "model": model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": 1,
            "temperature": 0,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        let started = Instant::now();
        let mut first = None;
        let mut usage = None;
        for data in sse_events(self.post("/v1/chat/completions", &body)) {
            let now = Instant::now();
            if data == "[DONE]" {
                break;
            }
            let chunk: Value = serde_json::from_str(&data).expect("an SSE chunk is JSON");
            assert!(
                chunk.get("error").is_none(),
                "corral failed mid-stream: {chunk}"
            );
            let content = chunk["choices"][0]["delta"]["content"].as_str();
            if first.is_none() && content.is_some_and(|text| !text.is_empty()) {
                first = Some((now - started, FirstEvent::Content));
            }
            if chunk["usage"].is_object() {
                first.get_or_insert((now - started, FirstEvent::Usage));
                usage = Some(chunk["usage"].clone());
            }
        }
        let (elapsed, ended_by) = first.expect("corral streamed neither content nor usage");
        let usage = usage.expect("corral sent no usage chunk");
        let count = |value: &Value| {
            value
                .as_u64()
                .unwrap_or_else(|| panic!("a token count in {usage}"))
        };
        FirstToken {
            elapsed,
            ended_by,
            prompt_tokens: count(&usage["prompt_tokens"]),
            cached_tokens: count(&usage["prompt_tokens_details"]["cached_tokens"]),
        }
    }
}

impl Drop for Corral {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads corral's log until it names its address. The rest of the log is drained and dropped on
/// a thread (a full pipe would block corral); the lines before it go into the panic message if
/// the address never comes.
fn listening_address(stderr: ChildStderr) -> String {
    let (lines_tx, lines) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let deadline = Instant::now() + PATIENCE;
    let mut log = Vec::new();
    while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if let Some(rest) = line.split("listening on http://").nth(1) {
            let address = rest.split_whitespace().next().unwrap_or_default();
            return address.to_owned();
        }
        log.push(line);
    }
    panic!(
        "corral did not start listening; its log:\n{}",
        log.join("\n")
    );
}
