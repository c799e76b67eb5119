//! The path under test: `corral serve` as a child process, asked over HTTP on 127.0.0.1 with a
//! keep-alive client, as an OpenAI client would.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use super::{PATIENCE, PROMPT, Timed, built_binary};

/// `corral serve` as a child process, stopped (SIGTERM, then SIGKILL) and reaped when dropped,
/// panics included.
pub struct Corral {
    child: Child,
    base: String,
    http: reqwest::blocking::Client,
    _state: tempfile::TempDir,
}

impl Corral {
    pub fn start(models: &Path) -> Self {
        let state = tempfile::tempdir().expect("temporary state directory");
        let mut child = Command::new(built_binary("corral"))
            .args([
                "serve",
                "--port",
                "0",
                "--drain-timeout",
                "5",
                "--models-dir",
            ])
            .arg(models)
            .arg("--state-dir")
            .arg(state.path())
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
            _state: state,
        }
    }

    fn post(&self, body: &Value) -> reqwest::blocking::Response {
        let response = self
            .http
            .post(format!("{}/v1/completions", self.base))
            .json(body)
            .send()
            .expect("sending a request to corral");
        let status = response.status();
        assert!(
            status.is_success(),
            "corral answered {status}: {}",
            response.text().unwrap_or_default()
        );
        response
    }

    /// Wall time of one non-streamed completion, up to the last byte of its body.
    pub fn complete(&self, model: &str, max_tokens: u32) -> Duration {
        let started = Instant::now();
        let body = self
            .post(&completion(model, max_tokens, false))
            .bytes()
            .expect("reading corral's response");
        let elapsed = started.elapsed();
        let body: Value = serde_json::from_slice(&body).expect("corral's response is JSON");
        assert_eq!(body["usage"]["completion_tokens"], max_tokens, "{body}");
        elapsed
    }

    /// One streamed completion over SSE; ends at `[DONE]`.
    pub fn stream(&self, model: &str, max_tokens: u32) -> Timed {
        let started = Instant::now();
        let response = self.post(&completion(model, max_tokens, true));
        let (mut first_text, mut completion_tokens) = (None, None);
        for line in BufReader::new(response).lines() {
            let line = line.expect("reading corral's event stream");
            let now = Instant::now();
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            if data == "[DONE]" {
                let first_text = first_text.expect("corral streamed no text");
                return Timed {
                    total: now - started,
                    decode: now - first_text,
                    completion_tokens: completion_tokens.expect("corral sent no usage chunk"),
                };
            }
            let chunk: Value = serde_json::from_str(data).expect("an SSE chunk is JSON");
            assert!(
                chunk.get("error").is_none(),
                "corral failed mid-stream: {chunk}"
            );
            let text = chunk["choices"][0]["text"].as_str().unwrap_or_default();
            if first_text.is_none() && !text.is_empty() {
                first_text = Some(now);
            }
            completion_tokens = completion_tokens.or(chunk["usage"]["completion_tokens"].as_u64());
        }
        panic!("corral's event stream ended without [DONE]");
    }
}

impl Drop for Corral {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        // SIGTERM lets corral drain and stop its workers; SIGKILL only if that hangs.
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

/// Reads corral's log until it names its address. The rest of the log is drained and dropped
/// on a thread (a full pipe would block corral); the lines before it go into the panic message
/// if the address never comes.
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
            return rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
        }
        log.push(line);
    }
    panic!(
        "corral did not start listening; its log:\n{}",
        log.join("\n")
    );
}

/// The HTTP request body; `direct::generate_request` is what corral turns it into.
fn completion(model: &str, max_tokens: u32, stream: bool) -> Value {
    json!({
        "model": model,
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
        "stream_options": {"include_usage": true},
    })
}
