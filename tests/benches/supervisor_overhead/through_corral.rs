//! The path under test: `corral serve` as a child process, asked over HTTP on 127.0.0.1 with a
//! keep-alive client, as an OpenAI client would.

use std::path::Path;
use std::time::{Duration, Instant};

use corral_tests::bench::CorralServer;
use corral_tests::server::sse_events;
use serde_json::{Value, json};

use super::{PATIENCE, PROMPT, Timed};

/// `corral serve` as a child process, stopped (SIGTERM, then SIGKILL) and reaped when dropped,
/// panics included; its state directory goes after it.
pub struct Corral {
    server: CorralServer,
    _state: tempfile::TempDir,
}

impl Corral {
    pub fn start(models: &Path) -> Self {
        let state = tempfile::tempdir().expect("temporary state directory");
        Self {
            server: CorralServer::start(models, state.path(), &[], PATIENCE),
            _state: state,
        }
    }

    fn post(&self, body: &Value) -> reqwest::blocking::Response {
        self.server.post("/v1/completions", body)
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
        for data in sse_events(response) {
            let now = Instant::now();
            if data == "[DONE]" {
                let first_text = first_text.expect("corral streamed no text");
                return Timed {
                    total: now - started,
                    decode: now - first_text,
                    completion_tokens: completion_tokens.expect("corral sent no usage chunk"),
                };
            }
            let chunk: Value = serde_json::from_str(&data).expect("an SSE chunk is JSON");
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

/// The HTTP request body; corral turns it into `bench::generate_request(PROMPT, max_tokens)`.
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
