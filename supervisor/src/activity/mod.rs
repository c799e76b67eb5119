//! Each API request as it happens, for the dashboard's activity view: a `started` event when its
//! generation begins, a `finished` event once its response has ended, with the tokens it cost
//! and how fast they came. The metrics middleware opens a request's record (`begin`) and keeps it
//! in a task-local for the handler's generation to fill in (`GenerationMetrics`), so both ends
//! write to one record and nothing is counted twice.
//!
//! The last finished requests are kept for a page that connects later, and every ten seconds
//! `history.rs` folds the finished ones into a sample of the last hour's charts.

mod history;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{broadcast, watch};

pub use history::{HISTORY_INTERVAL, HistoryView, Sample};

use history::History;

/// Finished requests kept for a page that connects later.
const RECENT: usize = 100;

tokio::task_local! {
    /// The record of the API request whose handler is running.
    static CURRENT: Arc<RequestRecord>;
}

#[derive(Debug)]
pub struct Activity {
    events: broadcast::Sender<RequestEvent>,
    /// Set when the server stops, which ends every subscriber's stream: a dashboard left open
    /// must not hold up the drain.
    closed: watch::Sender<bool>,
    recent: Mutex<VecDeque<RequestEvent>>,
    history: Mutex<History>,
    next_id: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventPhase {
    Started,
    Finished,
}

/// One request as the activity view shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RequestEvent {
    pub id: u64,
    pub phase: EventPhase,
    /// Milliseconds since the Unix epoch when the event happened.
    pub at_ms: u64,
    /// `chat`, `completions`, `messages`, `responses`, `embeddings`, `rerank`, ...
    pub api: &'static str,
    pub route: String,
    /// The client's `User-Agent`.
    pub client: String,
    pub model: String,
    pub status: Option<u16>,
    pub prompt_tokens: Option<u32>,
    pub cached_tokens: Option<u32>,
    /// The first prompt token that differed from what the prefix cache held, when it could tell.
    pub diverged_at: Option<u32>,
    pub output_tokens: Option<u32>,
    pub ttft_ms: Option<f64>,
    /// Generated tokens per second of decoding, as the worker timed it.
    pub tokens_per_second: Option<f64>,
    pub duration_ms: Option<f64>,
}

pub struct Subscription {
    /// The finished requests kept, oldest first.
    pub recent: Vec<RequestEvent>,
    events: broadcast::Receiver<RequestEvent>,
    closed: watch::Receiver<bool>,
}

impl Subscription {
    /// The next event; `None` once the server stops. A subscriber too slow to keep up misses
    /// some events, not the stream.
    pub async fn next(&mut self) -> Option<RequestEvent> {
        loop {
            tokio::select! {
                _ = self.closed.wait_for(|closed| *closed) => return None,
                received = self.events.recv() => match received {
                    Ok(event) => return Some(event),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            }
        }
    }
}

/// One request's record, filled in by the middleware and by its generation.
pub struct RequestRecord {
    activity: Arc<Activity>,
    started: Instant,
    event: Mutex<RequestEvent>,
}

impl Activity {
    pub fn new() -> Self {
        Self {
            events: broadcast::channel(256).0,
            closed: watch::Sender::new(false),
            recent: Mutex::new(VecDeque::with_capacity(RECENT)),
            history: Mutex::new(History::default()),
            next_id: AtomicU64::new(1),
        }
    }

    /// Opens the record of a request to `route`, or `None` for a route that is not one of the
    /// APIs (the dashboard's own polling, the admin routes).
    pub fn begin(
        self: &Arc<Self>,
        route: &str,
        client: Option<&str>,
    ) -> Option<Arc<RequestRecord>> {
        let api = api_of(route)?;
        Some(Arc::new(RequestRecord {
            activity: self.clone(),
            started: Instant::now(),
            event: Mutex::new(RequestEvent {
                id: self.next_id.fetch_add(1, Ordering::Relaxed),
                phase: EventPhase::Started,
                at_ms: now_ms(),
                api,
                route: route.to_owned(),
                client: client.unwrap_or_default().chars().take(200).collect(),
                model: String::new(),
                status: None,
                prompt_tokens: None,
                cached_tokens: None,
                diverged_at: None,
                output_tokens: None,
                ttft_ms: None,
                tokens_per_second: None,
                duration_ms: None,
            }),
        }))
    }

    /// Every event from now on, after the finished requests before them.
    pub fn subscribe(&self) -> Subscription {
        let events = self.events.subscribe();
        let recent = lock(&self.recent).iter().cloned().collect();
        Subscription {
            recent,
            events,
            closed: self.closed.subscribe(),
        }
    }

    /// Ends every subscription: the server is stopping.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Folds the requests finished since the last sample into one, with `used_bytes` held by the
    /// workers now.
    pub fn sample(&self, used_bytes: u64) {
        lock(&self.history).sample(now_ms(), used_bytes);
    }

    pub fn history(&self) -> HistoryView {
        lock(&self.history).view()
    }

    fn publish(&self, event: RequestEvent) {
        if event.phase == EventPhase::Finished {
            lock(&self.history).add(&event);
            let mut recent = lock(&self.recent);
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(event.clone());
        }
        // No page listening is no error.
        let _ = self.events.send(event);
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestRecord {
    /// Runs `handler` with this record as the current request's.
    pub async fn scope<F: Future>(self: Arc<Self>, handler: F) -> F::Output {
        CURRENT.scope(self, handler).await
    }

    /// The record of the API request whose handler is running, if any.
    pub fn current() -> Option<Arc<Self>> {
        CURRENT.try_with(Arc::clone).ok()
    }

    /// Its generation of `model` began.
    pub fn generating(&self, model: &str) {
        let event = {
            let mut event = lock(&self.event);
            event.model = model.to_owned();
            event.at_ms = now_ms();
            event.clone()
        };
        self.activity.publish(event);
    }

    pub fn first_token(&self) {
        lock(&self.event).ttft_ms = Some(self.started.elapsed().as_secs_f64() * 1000.0);
    }

    /// Its generation ended with `usage`, `decode_ms` of it generating.
    pub fn generated(&self, usage: &corral_ipc::Usage, decode_ms: u64) {
        let mut event = lock(&self.event);
        event.prompt_tokens = Some(usage.prompt_tokens);
        event.cached_tokens = Some(usage.cached_tokens);
        event.diverged_at = usage.diverged_at;
        event.output_tokens = Some(usage.completion_tokens);
        event.tokens_per_second = (decode_ms > 0 && usage.completion_tokens > 1)
            .then(|| f64::from(usage.completion_tokens) * 1000.0 / decode_ms as f64);
    }

    /// Its response ended (or was abandoned) with `status`, answering for `model`.
    pub fn finished(&self, status: u16, model: &str) {
        let event = {
            let mut event = lock(&self.event);
            event.phase = EventPhase::Finished;
            event.at_ms = now_ms();
            event.status = Some(status);
            if event.model.is_empty() {
                event.model = model.to_owned();
            }
            event.duration_ms = Some(self.started.elapsed().as_secs_f64() * 1000.0);
            event.clone()
        };
        self.activity.publish(event);
    }
}

/// The API a route template belongs to.
fn api_of(route: &str) -> Option<&'static str> {
    Some(match route {
        "/v1/chat/completions" => "chat",
        "/v1/completions" => "completions",
        "/v1/messages" => "messages",
        "/v1/messages/count_tokens" => "count_tokens",
        "/v1/responses" => "responses",
        "/v1/embeddings" => "embeddings",
        "/v1/rerank" | "/rerank" => "rerank",
        _ => return None,
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// A panic elsewhere while holding the lock leaves plain data behind, still usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
