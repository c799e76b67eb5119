//! Dispatching a generation to a worker: the HTTP layer's `Backend` over the registry, the
//! worker pool and the worker connections.
//!
//! A request holds a lease from `acquire` until its worker confirms the end of the sequence
//! (`Done` or `Error`), also when the client left earlier: the cancel guard sends `Cancel`, and
//! the relay task keeps draining until the worker says the sequence is over, so the worker is
//! never considered idle while it still computes.

use std::sync::Arc;
use std::time::Duration;

use corral_ipc::{
    EmbedRequest, FromWorker, GenerateRequest, ModelKind, Prompt, RejectKind, RerankRequest,
};
use tokio::sync::{mpsc, oneshot};

use crate::api::{
    Backend, BackendError, CancelOnDrop, Embedded, GenerationStream, ModelCard, PinnedModel,
    Scored, StreamEvent,
};
use crate::config::Config;
use crate::metrics::{GenerationMetrics, Metrics};
use crate::pool::{AcquireError, Lease, Pool};
use crate::process::{RequestHandle, WorkerClient, WorkerProcesses};
use crate::registry::SharedRegistry;
use crate::sampling_defaults::{SamplingDefaults, apply_tool_choice};

/// Events buffered between a worker and a slow client before the relay waits.
const STREAM_BUFFER: usize = 256;

pub struct Dispatch {
    registry: Arc<SharedRegistry>,
    pool: Pool<WorkerProcesses>,
    /// How long a request may wait for room or a backoff before its model starts.
    admission_wait: Duration,
    metrics: Arc<Metrics>,
    /// For each model's `[models.ID]` sampling defaults and default tool choice.
    config: Arc<Config>,
}

impl Dispatch {
    pub fn new(
        registry: Arc<SharedRegistry>,
        pool: Pool<WorkerProcesses>,
        metrics: Arc<Metrics>,
        config: Arc<Config>,
    ) -> Self {
        Self {
            registry,
            pool,
            admission_wait: config.memory.admission_wait,
            metrics,
            config,
        }
    }

    /// Fills in what `request` leaves out from the model's defaults: the one place every API's
    /// request passes once its model is known.
    fn apply_defaults(&self, model: &str, request: &mut GenerateRequest) {
        let settings = self.config.models.get(model);
        if let Some(entry) = self.registry.current().get(model) {
            SamplingDefaults::for_model(settings, entry).apply(request);
        }
        if let Some(choice) = settings.and_then(|settings| settings.tool_choice.as_deref()) {
            apply_tool_choice(choice, request);
        }
    }
}

/// A chat with more images than the model's `[models.ID] max_images`, refused without asking a
/// worker; the first image too many is named.
fn check_image_count(max: Option<usize>, request: &GenerateRequest) -> Result<(), BackendError> {
    let Prompt::Chat { images, .. } = &request.prompt else {
        return Ok(());
    };
    match max.and_then(|max| Some((max, images.get(max)?))) {
        None => Ok(()),
        Some((max, extra)) => Err(BackendError::Rejected {
            kind: RejectKind::InvalidRequest,
            message: format!(
                "{} images, over this model's max_images of {max} (the first one too many at {})",
                images.len(),
                extra.location
            ),
            param: Some(extra.location.clone()),
        }),
    }
}

impl Backend for Dispatch {
    /// The servable models only: a client cannot use the others.
    fn models(&self) -> Vec<ModelCard> {
        self.registry
            .current()
            .entries()
            .filter(|entry| entry.is_servable())
            .map(|entry| ModelCard {
                id: entry.id.clone(),
                created: entry.created,
                kind: entry.kind(),
                vision: entry.vision(),
            })
            .collect()
    }

    fn resolve(&self, name: &str) -> Option<String> {
        self.registry.current().resolve(name).map(str::to_owned)
    }

    fn kind(&self, model: &str) -> ModelKind {
        self.registry
            .current()
            .get(model)
            .map_or(ModelKind::Chat, |entry| entry.kind())
    }

    async fn embed(&self, model: &str, request: EmbedRequest) -> Result<Embedded, BackendError> {
        let answer = self
            .one_shot(model, |client| {
                let client = client.clone();
                let request = request.clone();
                async move { client.embed(request).await }
            })
            .await?;
        match answer {
            FromWorker::Embeddings {
                vectors,
                prompt_tokens,
                ..
            } => Ok(Embedded {
                vectors,
                prompt_tokens,
            }),
            other => Err(unexpected(model, &other, "Embeddings")),
        }
    }

    async fn rerank(&self, model: &str, request: RerankRequest) -> Result<Scored, BackendError> {
        let answer = self
            .one_shot(model, |client| {
                let client = client.clone();
                let request = request.clone();
                async move { client.rerank(request).await }
            })
            .await?;
        match answer {
            FromWorker::Scores {
                scores,
                prompt_tokens,
                ..
            } => Ok(Scored {
                scores,
                prompt_tokens,
            }),
            other => Err(unexpected(model, &other, "Scores")),
        }
    }

    fn pinned_models(&self) -> Vec<PinnedModel> {
        self.pool
            .snapshot()
            .into_iter()
            .filter(|entry| entry.pinned)
            .map(|entry| PinnedModel {
                id: entry.model,
                state: entry.phase.name(),
                pid: entry.pid,
            })
            .collect()
    }

    async fn generate(
        &self,
        model: &str,
        mut request: GenerateRequest,
    ) -> Result<GenerationStream, BackendError> {
        self.check_servable(model)?;
        check_image_count(
            self.config.models.get(model).and_then(|s| s.max_images),
            &request,
        )?;
        self.apply_defaults(model, &mut request);
        // Counts as queued from here until the worker accepts; dropped on every early return.
        let mut observed = GenerationMetrics::start(self.metrics.clone(), model);
        let mut retried = false;
        loop {
            let lease = self
                .pool
                .acquire(model, self.admission_wait)
                .await
                .map_err(unavailable)?;
            match submit(&lease, request.clone()).await {
                Ok(accepted) => {
                    observed.accepted(accepted.prompt_tokens);
                    let (events, receiver) = mpsc::channel(STREAM_BUFFER);
                    tokio::spawn(relay(accepted.handle, events, lease, observed));
                    return Ok(GenerationStream::new(
                        accepted.prompt_tokens,
                        receiver,
                        accepted.cancel,
                    )
                    .with_cached_tokens(accepted.cached_tokens));
                }
                // The worker died before it took the request, so nothing of it reached the
                // client: once more on the worker that replaces it. Only once, so a request that
                // kills every worker it reaches cannot take down a chain of them.
                Err(error) if !retried && lease.handle().process().exited().is_some() => {
                    tracing::info!(model, pid = lease.pid(), %error, "the worker died before it accepted the request; retrying on a new worker");
                    retried = true;
                }
                Err(error) => return Err(error),
            }
        }
    }
}

impl Dispatch {
    fn check_servable(&self, model: &str) -> Result<(), BackendError> {
        match self
            .registry
            .current()
            .get(model)
            .and_then(|entry| entry.unservable_reason())
        {
            Some(reason) => Err(BackendError::Unservable {
                model: model.to_owned(),
                reason: reason.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// Runs a request answered by one frame (`Embed`, `Rerank`) on a leased worker of `model`:
    /// admitted, leased and retried once on a worker that died before answering, as
    /// generations are. The lease is held until the worker answers, even if the caller stops
    /// waiting (the request is then cancelled), so the worker is never stopped as idle while it
    /// still computes.
    async fn one_shot<F, Fut>(&self, model: &str, send: F) -> Result<FromWorker, BackendError>
    where
        F: Fn(&Arc<WorkerClient>) -> Fut,
        Fut: Future<Output = Result<RequestHandle, crate::process::ClientError>>,
    {
        self.check_servable(model)?;
        let mut observed = GenerationMetrics::start(self.metrics.clone(), model);
        let mut retried = false;
        loop {
            let lease = self
                .pool
                .acquire(model, self.admission_wait)
                .await
                .map_err(unavailable)?;
            let (answer, lease) = match send(lease.handle()).await {
                Ok(handle) => {
                    // A client that leaves cancels the request; the worker still answers it
                    // (with an error), which ends the lease.
                    let mut cancel = cancel_guard(lease.handle(), handle.id);
                    let (answer, answered) = oneshot::channel();
                    tokio::spawn(await_answer(handle, lease, answer));
                    let (frame, lease) = answered.await.map_err(|_| BackendError::Internal {
                        message: format!("the request to the worker for {model} was dropped"),
                    })?;
                    cancel.disarm();
                    (one_answer(model, lease.pid(), frame), lease)
                }
                Err(error) => (Attempt::Failed(error.to_string()), lease),
            };
            match answer {
                Attempt::Answered(frame) => {
                    if let FromWorker::Embeddings { prompt_tokens, .. }
                    | FromWorker::Scores { prompt_tokens, .. } = &frame
                    {
                        observed.accepted(*prompt_tokens);
                    }
                    lease.complete();
                    return Ok(frame);
                }
                Attempt::Refused(error) => return Err(error),
                // The worker died before it answered: nothing reached the client, and the
                // request has no effect, so it runs once more on the worker that replaces it.
                Attempt::Failed(message)
                    if !retried && lease.handle().process().exited().is_some() =>
                {
                    tracing::info!(
                        model,
                        pid = lease.pid(),
                        message,
                        "the worker died before it answered; retrying on a new worker"
                    );
                    retried = true;
                }
                Attempt::Failed(message) => return Err(BackendError::WorkerFailed { message }),
            }
        }
    }
}

/// What one worker made of a one-answer request.
enum Attempt {
    Answered(FromWorker),
    Refused(BackendError),
    /// The worker failed, or died, before it answered.
    Failed(String),
}

fn one_answer(model: &str, pid: u32, frame: Option<FromWorker>) -> Attempt {
    match frame {
        Some(FromWorker::Rejected {
            kind,
            message,
            param,
            ..
        }) => Attempt::Refused(BackendError::Rejected {
            kind,
            message,
            param,
        }),
        Some(FromWorker::Error { message, .. }) => Attempt::Failed(message),
        Some(frame) => Attempt::Answered(frame),
        None => Attempt::Failed(format!(
            "the worker for {model} (pid {pid}) closed the request without answering"
        )),
    }
}

/// Waits for the one frame that answers `handle`'s request, holding `lease` until it comes,
/// then hands both back (to a caller that may have left: the lease then ends here).
async fn await_answer(
    mut handle: RequestHandle,
    lease: Lease<Arc<WorkerClient>>,
    answer: oneshot::Sender<(Option<FromWorker>, Lease<Arc<WorkerClient>>)>,
) {
    let frame = handle.events.recv().await;
    let _ = answer.send((frame, lease));
}

fn unexpected(model: &str, frame: &FromWorker, wanted: &str) -> BackendError {
    BackendError::Internal {
        message: format!(
            "the worker for {model} answered {} where {wanted} was expected",
            frame.name()
        ),
    }
}

/// A request its worker accepted.
struct Accepted {
    handle: RequestHandle,
    prompt_tokens: u32,
    cached_tokens: u32,
    cancel: CancelOnDrop,
}

/// Sends `request` to the leased worker and waits for its `Accepted` (or why not).
async fn submit(
    lease: &Lease<Arc<WorkerClient>>,
    request: GenerateRequest,
) -> Result<Accepted, BackendError> {
    let client = lease.handle();
    let mut handle =
        client
            .generate(request)
            .await
            .map_err(|error| BackendError::WorkerFailed {
                message: error.to_string(),
            })?;
    // Armed from here on: if this future or the stream is dropped, the worker is told.
    let mut cancel = cancel_guard(client, handle.id);
    let (prompt_tokens, cached_tokens) = match handle.events.recv().await {
        Some(FromWorker::Accepted {
            prompt_tokens,
            cached_tokens,
            ..
        }) => (prompt_tokens, cached_tokens.unwrap_or(0)),
        Some(FromWorker::Rejected {
            overflow: Some(overflow),
            ..
        }) => {
            cancel.disarm();
            return Err(BackendError::ContextOverflow(overflow));
        }
        Some(FromWorker::Rejected {
            kind,
            message,
            param,
            ..
        }) => {
            cancel.disarm();
            return Err(BackendError::Rejected {
                kind,
                message,
                param,
            });
        }
        Some(FromWorker::Error { message, .. }) => {
            cancel.disarm();
            return Err(BackendError::WorkerFailed { message });
        }
        Some(other) => {
            return Err(BackendError::Internal {
                message: format!("worker sent {} before Accepted", other.name()),
            });
        }
        None => {
            cancel.disarm();
            return Err(BackendError::WorkerFailed {
                message: format!("the worker for {} closed the request", lease.model()),
            });
        }
    };
    Ok(Accepted {
        handle,
        prompt_tokens,
        cached_tokens,
        cancel,
    })
}

fn cancel_guard(client: &Arc<WorkerClient>, id: u64) -> CancelOnDrop {
    let client = client.clone();
    CancelOnDrop::new(move || client.cancel(id))
}

/// Why no lease: a model that can never start is the client's to stop asking for (400), one
/// without room a 507, and a failed or backing-off start a 503 to retry.
fn unavailable(error: AcquireError) -> BackendError {
    if let AcquireError::Unservable { model, reason } = error {
        return BackendError::Unservable { model, reason };
    }
    match error.retry_after() {
        None => BackendError::InsufficientMemory {
            message: error.to_string(),
        },
        Some(retry_after) => BackendError::Unavailable {
            message: error.to_string(),
            retry_after_secs: retry_after.as_secs_f64().ceil().max(1.0) as u64,
        },
    }
}

/// Forwards the worker's frames to the HTTP stream until the sequence ends, then ends the lease
/// (completed when the worker finished the sequence, whether or not the client stayed).
async fn relay(
    mut handle: RequestHandle,
    events: mpsc::Sender<StreamEvent>,
    lease: Lease<Arc<WorkerClient>>,
    mut observed: GenerationMetrics,
) {
    let mut client_gone = false;
    while let Some(frame) = handle.events.recv().await {
        let event = match frame {
            FromWorker::Delta {
                text,
                reasoning,
                tool_calls,
                token_count,
                logprobs,
                ..
            } => {
                observed.tokens(token_count);
                StreamEvent::Delta {
                    text,
                    reasoning,
                    tool_calls,
                    token_count,
                    logprobs,
                }
            }
            FromWorker::Done {
                finish_reason,
                stop_sequence,
                usage,
                timings,
                ..
            } => {
                observed.finished(&usage, &timings);
                StreamEvent::Done {
                    finish_reason,
                    stop_sequence,
                    usage,
                }
            }
            FromWorker::Error { message, .. } => StreamEvent::Failed { message },
            other => {
                tracing::warn!(
                    model = lease.model(),
                    pid = lease.pid(),
                    frame = other.name(),
                    "unexpected frame in a stream"
                );
                continue;
            }
        };
        let finished = matches!(event, StreamEvent::Done { .. });
        let last = finished || matches!(event, StreamEvent::Failed { .. });
        if !client_gone && events.send(event).await.is_err() {
            client_gone = true;
        }
        if finished {
            lease.complete();
            return;
        }
        if last {
            return;
        }
    }
    if !client_gone {
        let message = format!(
            "the worker for {} (pid {}) ended the stream without finishing it",
            lease.model(),
            lease.pid()
        );
        let _ = events.send(StreamEvent::Failed { message }).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::pool::ExitInfo;

    #[test]
    fn images_past_a_models_max_images_are_refused_naming_the_first_one_too_many() {
        let image = |location: &str| corral_ipc::PromptImage {
            bytes: vec![1, 2, 3],
            location: location.to_owned(),
        };
        let chat = GenerateRequest::greedy(
            Prompt::Chat {
                messages: Vec::new(),
                tools: None,
                template_kwargs: None,
                images: vec![
                    image("messages[0].content[0]"),
                    image("messages[2].content[1]"),
                ],
            },
            1,
        );
        assert_eq!(check_image_count(None, &chat), Ok(()));
        assert_eq!(check_image_count(Some(2), &chat), Ok(()));
        assert_eq!(
            check_image_count(Some(1), &chat),
            Err(BackendError::Rejected {
                kind: RejectKind::InvalidRequest,
                message: "2 images, over this model's max_images of 1 (the first one too many \
                          at messages[2].content[1])"
                    .to_owned(),
                param: Some("messages[2].content[1]".to_owned()),
            })
        );
        let text = GenerateRequest::greedy(Prompt::Text("hi".into()), 1);
        assert_eq!(check_image_count(Some(0), &text), Ok(()));
    }

    #[test]
    fn a_model_that_can_never_start_is_unservable_and_a_failed_start_unavailable() {
        let reason = "/m/tiny: tensor model.norm.weight is missing".to_owned();
        let never = AcquireError::Unservable {
            model: "tiny".to_owned(),
            reason: reason.clone(),
        };
        assert_eq!(
            unavailable(never),
            BackendError::Unservable {
                model: "tiny".to_owned(),
                reason
            }
        );
        let failed = AcquireError::StartFailed {
            model: "tiny".to_owned(),
            exit: ExitInfo::LaunchFailed {
                message: "out of memory".to_owned(),
            },
            retry_after: Duration::ZERO,
        };
        assert!(matches!(
            unavailable(failed),
            BackendError::Unavailable {
                retry_after_secs: 1,
                ..
            }
        ));
    }
}
