//! HTTP-layer tests: the real router over an in-memory [`Backend`] that replays a scripted
//! generation, so every status, body shape and stream order is checked without any process.

mod chat;
mod completions;
mod errors;
mod models;
mod responses;
mod responses_stream;
mod streams;
mod tools;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode, header};
use corral_ipc::{FinishReason, GenerateRequest, Usage};
use serde_json::Value;
use tokio::sync::mpsc;
use tower::ServiceExt;

use super::{Backend, BackendError, CancelOnDrop, GenerationStream, ModelCard, StreamEvent};

/// What the fake does with the next `generate` call.
#[derive(Clone)]
enum Script {
    /// Sends these events; with `hold`, keeps the sender so the stream stays open.
    Events {
        events: Vec<StreamEvent>,
        hold: bool,
    },
    Fail(BackendError),
}

struct FakeBackend {
    script: Mutex<Script>,
    requests: Mutex<Vec<(String, GenerateRequest)>>,
    cancels: Arc<AtomicUsize>,
    held: Mutex<Vec<mpsc::Sender<StreamEvent>>>,
}

impl FakeBackend {
    fn new(script: Script) -> Arc<Self> {
        Arc::new(FakeBackend {
            script: Mutex::new(script),
            requests: Mutex::new(Vec::new()),
            cancels: Arc::new(AtomicUsize::new(0)),
            held: Mutex::new(Vec::new()),
        })
    }

    fn replying(events: Vec<StreamEvent>) -> Arc<Self> {
        Self::new(Script::Events {
            events,
            hold: false,
        })
    }

    fn failing(error: BackendError) -> Arc<Self> {
        Self::new(Script::Fail(error))
    }

    fn last_request(&self) -> (String, GenerateRequest) {
        self.requests
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request reached the backend")
    }

    fn request_count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    fn cancels(&self) -> usize {
        self.cancels.load(Ordering::SeqCst)
    }
}

impl Backend for FakeBackend {
    fn models(&self) -> Vec<ModelCard> {
        vec![ModelCard {
            id: "tiny".to_owned(),
            created: 1_700_000_000,
        }]
    }

    fn resolve(&self, name: &str) -> Option<String> {
        matches!(name, "tiny" | "tiny-alias").then(|| "tiny".to_owned())
    }

    async fn generate(
        &self,
        model: &str,
        request: GenerateRequest,
    ) -> Result<GenerationStream, BackendError> {
        self.requests
            .lock()
            .unwrap()
            .push((model.to_owned(), request));
        let script = self.script.lock().unwrap().clone();
        let (events, hold) = match script {
            Script::Events { events, hold } => (events, hold),
            Script::Fail(error) => return Err(error),
        };
        let (sender, receiver) = mpsc::channel(events.len() + 1);
        for event in events {
            sender.try_send(event).unwrap();
        }
        if hold {
            self.held.lock().unwrap().push(sender);
        }
        let cancels = self.cancels.clone();
        let guard = CancelOnDrop::new(move || {
            cancels.fetch_add(1, Ordering::SeqCst);
        });
        Ok(GenerationStream::new(3, receiver, guard))
    }
}

fn delta(text: &str) -> StreamEvent {
    StreamEvent::Delta {
        text: text.to_owned(),
        reasoning: String::new(),
        tool_calls: Vec::new(),
        token_count: 1,
        logprobs: None,
    }
}

fn done(reason: FinishReason) -> StreamEvent {
    StreamEvent::Done {
        finish_reason: reason,
        stop_sequence: None,
        usage: Usage {
            prompt_tokens: 3,
            completion_tokens: 2,
            cached_tokens: 0,
        },
    }
}

/// "Hello", " world", stopped.
fn hello_world() -> Vec<StreamEvent> {
    vec![delta("Hello"), delta(" world"), done(FinishReason::Stop)]
}

fn app(backend: &Arc<FakeBackend>) -> Router {
    super::router(backend.clone(), 16)
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the body is JSON")
    }

    /// The `data:` payloads of an SSE body, in order.
    fn sse_data(&self) -> Vec<String> {
        std::str::from_utf8(&self.body)
            .expect("SSE is UTF-8")
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(str::to_owned)
            .collect()
    }

    /// The SSE payloads before `[DONE]`, parsed.
    fn sse_json(&self) -> Vec<Value> {
        self.sse_data()
            .iter()
            .take_while(|data| *data != "[DONE]")
            .map(|data| serde_json::from_str(data).expect("each event is JSON"))
            .collect()
    }

    /// Asserts the OpenAI error shape and returns its `error` object.
    fn error(&self) -> Value {
        let body = self.json();
        let error = body["error"].clone();
        assert!(error["message"].is_string(), "no message in {body}");
        assert!(error["type"].is_string(), "no type in {body}");
        assert!(
            error.get("code").is_some() && error.get("param").is_some(),
            "{body}"
        );
        error
    }
}

async fn send(app: Router, request: Request<Body>) -> Reply {
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    Reply {
        status,
        headers,
        body,
    }
}

fn post_raw(path: &str, content_type: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, content_type)
        .body(body.into())
        .unwrap()
}

async fn post(backend: &Arc<FakeBackend>, path: &str, body: Value) -> Reply {
    let request = post_raw(path, "application/json", body.to_string());
    send(app(backend), request).await
}

async fn get(backend: &Arc<FakeBackend>, path: &str) -> Reply {
    let request = Request::get(path).body(Body::empty()).unwrap();
    send(app(backend), request).await
}
