//! HTTP-layer tests: the real router over an in-memory [`Backend`] that replays a scripted
//! generation, so every status, body shape and stream order is checked without any process.

mod chat;
mod completions;
mod embeddings;
mod errors;
mod images;
mod models;
mod rerank;
mod responses;
mod responses_stream;
mod responses_tools;
mod streams;
mod tools;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode, header};
use corral_ipc::{
    EmbedRequest, FinishReason, GenerateRequest, ModelKind, RerankRequest, ToolCall, Usage,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tower::ServiceExt;

use super::{
    Backend, BackendError, CancelOnDrop, Embedded, GenerationStream, ModelCard, Scored, StreamEvent,
};

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
    embeds: Mutex<Vec<(String, EmbedRequest)>>,
    reranks: Mutex<Vec<(String, RerankRequest)>>,
    cancels: Arc<AtomicUsize>,
    held: Mutex<Vec<mpsc::Sender<StreamEvent>>>,
}

impl FakeBackend {
    fn new(script: Script) -> Arc<Self> {
        Arc::new(FakeBackend {
            script: Mutex::new(script),
            requests: Mutex::new(Vec::new()),
            embeds: Mutex::new(Vec::new()),
            reranks: Mutex::new(Vec::new()),
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
        vec![
            ModelCard {
                id: "tiny".to_owned(),
                created: 1_700_000_000,
                kind: ModelKind::Chat,
                vision: false,
            },
            ModelCard {
                id: "embedder".to_owned(),
                created: 1_700_000_000,
                kind: ModelKind::Embedding,
                vision: false,
            },
            ModelCard {
                id: "reranker".to_owned(),
                created: 1_700_000_000,
                kind: ModelKind::Rerank,
                vision: false,
            },
        ]
    }

    fn resolve(&self, name: &str) -> Option<String> {
        match name {
            "tiny" | "tiny-alias" => Some("tiny".to_owned()),
            "embedder" | "reranker" => Some(name.to_owned()),
            _ => None,
        }
    }

    fn kind(&self, model: &str) -> ModelKind {
        self.models()
            .into_iter()
            .find(|card| card.id == model)
            .map_or(ModelKind::Chat, |card| card.kind)
    }

    async fn embed(&self, model: &str, request: EmbedRequest) -> Result<Embedded, BackendError> {
        self.embeds
            .lock()
            .unwrap()
            .push((model.to_owned(), request.clone()));
        if let Script::Fail(error) = self.script.lock().unwrap().clone() {
            return Err(error);
        }
        // Input i embeds as [i, 1 / (i + 1)], each one token long.
        let vectors = (0..request.inputs.len())
            .map(|index| vec![index as f32, 1.0 / (index + 1) as f32])
            .collect();
        Ok(Embedded {
            vectors,
            prompt_tokens: request.inputs.len() as u32,
        })
    }

    async fn rerank(&self, model: &str, request: RerankRequest) -> Result<Scored, BackendError> {
        self.reranks
            .lock()
            .unwrap()
            .push((model.to_owned(), request.clone()));
        if let Script::Fail(error) = self.script.lock().unwrap().clone() {
            return Err(error);
        }
        // A document's score is its length: longer documents rank first.
        let scores = request
            .documents
            .iter()
            .map(|document| document.len() as f32)
            .collect();
        Ok(Scored {
            scores,
            prompt_tokens: 2 * request.documents.len() as u32,
        })
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
            ..Usage::default()
        },
    }
}

/// "Hello", " world", stopped.
/// One whole call of `name`, then the end of the answer.
fn called(name: &str, arguments: &str) -> Vec<StreamEvent> {
    vec![
        StreamEvent::Delta {
            text: String::new(),
            reasoning: String::new(),
            tool_calls: vec![ToolCall {
                index: 0,
                name: name.to_owned(),
                arguments: arguments.to_owned(),
            }],
            token_count: 1,
            logprobs: None,
        },
        done(FinishReason::ToolCalls),
    ]
}

fn hello_world() -> Vec<StreamEvent> {
    vec![delta("Hello"), delta(" world"), done(FinishReason::Stop)]
}

fn app(backend: &Arc<FakeBackend>) -> Router {
    super::router(backend.clone(), 16, image_fetch(true))
}

/// As a loopback server fetches image URLs (or not), with the default cap and timeout.
pub(crate) fn image_fetch(enabled: bool) -> super::ImageFetch {
    super::ImageFetch::new(
        enabled,
        20 * 1024 * 1024,
        std::time::Duration::from_secs(10),
    )
    .expect("a client")
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
