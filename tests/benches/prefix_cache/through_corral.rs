//! `corral serve` as a child process for this bench, and the calls it makes over HTTP on
//! 127.0.0.1: load a model, kill its worker, read the worker's prefix cache counters, and time a
//! streamed chat request to its first token.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use corral_ipc::PrefixCacheStats;
use corral_tests::bench::CorralServer;
use corral_tests::server::sse_events;
use serde_json::{Value, json};

use super::PATIENCE;

/// `corral serve` with its default prefix cache (SSD tier under `<state>/kv-cache`), stopped
/// (SIGTERM, which stops its workers, then SIGKILL) and reaped when dropped, panics included.
pub struct Corral {
    server: CorralServer,
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
        Self {
            server: CorralServer::start(models, state, &[], PATIENCE),
        }
    }

    /// Starts the model's worker if it is not running; returns once it is ready.
    pub fn load(&self, model: &str) {
        self.server
            .post(&format!("/v1/models/{model}/load"), &json!({}));
    }

    /// SIGKILLs the model's worker; returns once it is reaped.
    pub fn kill(&self, model: &str) {
        self.server
            .post(&format!("/admin/workers/{model}/kill"), &json!({}));
    }

    /// The ready worker's prefix cache counters, from `GET /admin/workers`.
    pub fn prefix_stats(&self, model: &str) -> PrefixCacheStats {
        let workers = self.server.get_json("/admin/workers");
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
        for data in sse_events(self.server.post("/v1/chat/completions", &body)) {
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
