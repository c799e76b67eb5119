//! The seam between the HTTP layer and whatever runs generations (the worker pool in `corral`,
//! an in-memory fake in the API tests).
//!
//! The HTTP layer needs three things from it: the model list, alias resolution, and a way to
//! start a generation whose events it can relay. Keeping that behind a trait lets the handlers be
//! tested without processes, and keeps pool policy (leases, eviction, respawn) out of them.
//!
//! Cancellation is tied to ownership: a [`GenerationStream`] carries a [`CancelOnDrop`] guard, so
//! when a client disconnects and axum drops the response body, the guard runs the backend's
//! cancel action (the pool sends `Cancel { id }`). The guard is disarmed once the stream has
//! delivered its terminal event, so a finished sequence is never cancelled.

use std::future::Future;

use corral_ipc::{
    ContextOverflow, EmbedRequest, FinishReason, GenerateRequest, ModelKind, RejectKind,
    RerankRequest, TokenLogprob, ToolCall, Usage,
};
use tokio::sync::mpsc;

/// Runs generations for the HTTP layer. Handlers are generic over it, so `generate` can be an
/// `async fn` in implementations.
pub trait Backend: Send + Sync + 'static {
    /// Every model a client may ask for, by canonical id.
    fn models(&self) -> Vec<ModelCard>;

    /// The canonical id for a model name or alias, or `None` if no such model exists.
    fn resolve(&self, name: &str) -> Option<String>;

    /// What the canonical model `model` answers, so a request for another kind is refused
    /// before any worker starts. A model the worker could not describe counts as a chat model,
    /// as does every model of a backend that serves only chat models.
    fn kind(&self, _model: &str) -> ModelKind {
        ModelKind::Chat
    }

    /// Starts a generation on the canonical model `model`. Resolves once the worker has answered:
    /// `Ok` when it accepted (the stream carries its prompt's token count), `Err` when it refused
    /// or could not be reached. If the future is dropped before it resolves (the
    /// client went away while the model was loading or the worker deciding), the implementation
    /// cancels whatever it started: no [`CancelOnDrop`] exists yet to do it.
    fn generate(
        &self,
        model: &str,
        request: GenerateRequest,
    ) -> impl Future<Output = Result<GenerationStream, BackendError>> + Send;

    /// Embeds `request.inputs` with the embedding model `model`; resolves once the worker has
    /// answered with every vector (or refused). The request holds its worker's lease until then.
    /// A backend that serves only chat models has no model to embed with.
    fn embed(
        &self,
        model: &str,
        _request: EmbedRequest,
    ) -> impl Future<Output = Result<Embedded, BackendError>> + Send {
        let model = model.to_owned();
        async move { Err(BackendError::UnknownModel { model }) }
    }

    /// Scores `request.documents` against `request.query` with the rerank model `model`, as
    /// `embed` does.
    fn rerank(
        &self,
        model: &str,
        _request: RerankRequest,
    ) -> impl Future<Output = Result<Scored, BackendError>> + Send {
        let model = model.to_owned();
        async move { Err(BackendError::UnknownModel { model }) }
    }

    /// The models kept loaded (pinned) and their state now, for `GET /health`: the server is
    /// ready once each of them is. A backend without pinned models has none.
    fn pinned_models(&self) -> Vec<PinnedModel> {
        Vec::new()
    }
}

/// A pinned model's state, as `GET /health?verbose=1` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedModel {
    pub id: String,
    /// `ready`, `starting`, `stopping`, `failed` or `not_running`.
    pub state: &'static str,
    pub pid: Option<u32>,
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCard {
    pub id: String,
    /// Unix seconds; when the model was installed or first seen.
    pub created: u64,
    pub kind: ModelKind,
    /// Whether it reads images.
    pub vision: bool,
}

/// An embedding model's answer: one vector per input, in the request's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    /// Tokens of every input together, as the worker counted them.
    pub prompt_tokens: u32,
}

/// A rerank model's answer: one score per document, in the request's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub scores: Vec<f32>,
    /// Tokens of every query-document pair together.
    pub prompt_tokens: u32,
}

/// What an accepted generation reports, in order: any number of `Delta`, then `Done` or
/// `Failed`.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    Delta {
        text: String,
        reasoning: String,
        tool_calls: Vec<ToolCall>,
        token_count: u32,
        logprobs: Option<Vec<TokenLogprob>>,
    },
    Done {
        finish_reason: FinishReason,
        /// The stop string that ended the answer, when one did.
        stop_sequence: Option<String>,
        usage: Usage,
    },
    /// The request was accepted but could not finish (the worker died or reported an error).
    Failed { message: String },
}

impl StreamEvent {
    fn is_terminal(&self) -> bool {
        matches!(self, StreamEvent::Done { .. } | StreamEvent::Failed { .. })
    }
}

/// The events of one accepted generation, and the guard that cancels it if they are abandoned.
#[derive(Debug)]
pub struct GenerationStream {
    /// The prompt's length in tokens, as the worker counted it when it accepted.
    pub prompt_tokens: u32,
    /// Of those, restored from the worker's prefix cache.
    pub cached_tokens: u32,
    events: mpsc::Receiver<StreamEvent>,
    cancel: CancelOnDrop,
}

impl GenerationStream {
    pub fn new(
        prompt_tokens: u32,
        events: mpsc::Receiver<StreamEvent>,
        cancel: CancelOnDrop,
    ) -> Self {
        GenerationStream {
            prompt_tokens,
            cached_tokens: 0,
            events,
            cancel,
        }
    }

    pub fn with_cached_tokens(mut self, cached_tokens: u32) -> Self {
        self.cached_tokens = cached_tokens;
        self
    }

    /// The next event, or `None` when the backend dropped its sender. A terminal event disarms
    /// the cancel guard: there is nothing left to cancel.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        let event = self.events.recv().await;
        if event.as_ref().is_some_and(StreamEvent::is_terminal) {
            self.cancel.disarm();
        }
        event
    }
}

/// Runs its action once when dropped, unless disarmed first.
pub struct CancelOnDrop {
    action: Option<Box<dyn FnOnce() + Send>>,
}

impl CancelOnDrop {
    pub fn new(action: impl FnOnce() + Send + 'static) -> Self {
        CancelOnDrop {
            action: Some(Box::new(action)),
        }
    }

    /// Drops the action without running it.
    pub fn disarm(&mut self) {
        self.action = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(action) = self.action.take() {
            action();
        }
    }
}

impl std::fmt::Debug for CancelOnDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelOnDrop")
            .field("armed", &self.action.is_some())
            .finish()
    }
}

/// Why a generation could not start or finish; `api::error` maps each to one HTTP status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    #[error("the model `{model}` does not exist")]
    UnknownModel { model: String },
    /// The model was found, but its worker cannot serve it (`corral models` lists why).
    #[error("the model `{model}` cannot be served: {reason}")]
    Unservable { model: String, reason: String },
    /// The model cannot serve now (crash-looping, queue full); the client may retry later.
    #[error("{message}")]
    Unavailable {
        message: String,
        retry_after_secs: u64,
    },
    /// The model cannot fit in memory even after evicting idle workers.
    #[error("{message}")]
    InsufficientMemory { message: String },
    /// The worker refused the request; `param` names the request field at fault, if one is.
    #[error("{message}")]
    Rejected {
        kind: RejectKind,
        message: String,
        param: Option<String>,
    },
    /// The prompt does not fit the model's context. Worded as OpenAI words it, since clients
    /// (LiteLLM, agent CLIs) look for "maximum context length"; Anthropic's routes reword it.
    #[error(
        "This model's maximum context length is {} tokens. However, your messages resulted in \
         {} tokens. Please reduce the length of the messages.",
        .0.context_tokens,
        .0.prompt_tokens
    )]
    ContextOverflow(ContextOverflow),
    /// The worker failed before it answered, or died while generating.
    #[error("the worker failed: {message}")]
    WorkerFailed { message: String },
    #[error("internal error: {message}")]
    Internal { message: String },
}
