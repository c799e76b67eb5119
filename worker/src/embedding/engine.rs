//! The engine thread of an embedding or rerank worker: it owns the encoder (all MLX state),
//! checks and tokenizes each request as it arrives, and runs the batcher's padded batches while
//! any request waits. Requests that arrive during a batch join the pool before the next one is
//! formed, so concurrent requests share batches.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;

use corral_ipc::{EmbedRequest, FromWorker, ModelKind, RerankRequest};

use super::batcher::{Batcher, DEFAULT_MAX_BATCH_TOKENS, Item};
use super::{EmbedLoadError, Embedder};
use crate::engine::{Gauges, MemorySnapshot, ModelInfo, Occupancy};

/// What a request asks of the encoder.
pub enum Work {
    Embed(EmbedRequest),
    Rerank(RerankRequest),
}

/// Where a request's answer goes, called once on the engine thread. A request cancelled before
/// its last batch gets `Error` ("cancelled"), so that every request ends with one frame.
pub type Reply = Box<dyn FnOnce(FromWorker) + Send>;

pub struct EncodeJob {
    pub id: u64,
    pub work: Work,
    pub cancel: Arc<AtomicBool>,
    pub reply: Reply,
}

#[derive(Debug, thiserror::Error)]
pub enum EncoderEngineError {
    #[error(transparent)]
    Load(#[from] EmbedLoadError),
    #[error("cannot start the engine thread: {0}")]
    Spawn(std::io::Error),
    #[error("the engine thread has stopped")]
    Stopped,
}

pub struct EncoderEngine {
    jobs: mpsc::Sender<EncodeJob>,
    gauges: Arc<Gauges>,
    thread: Option<thread::JoinHandle<()>>,
    pub info: ModelInfo,
    pub kind: ModelKind,
}

impl EncoderEngine {
    /// Starts the engine thread and loads the encoder on it; returns once loading ended.
    pub fn start(model_dir: PathBuf) -> Result<Self, EncoderEngineError> {
        Self::start_with(model_dir, DEFAULT_MAX_BATCH_TOKENS)
    }

    /// As [`EncoderEngine::start`], with at most `max_batch_tokens` padded tokens per batch.
    pub fn start_with(
        model_dir: PathBuf,
        max_batch_tokens: usize,
    ) -> Result<Self, EncoderEngineError> {
        let (jobs, queue) = mpsc::channel::<EncodeJob>();
        let (loaded_tx, loaded_rx) = mpsc::channel();
        let gauges = Arc::new(Gauges::default());
        let thread_gauges = gauges.clone();
        let thread = thread::Builder::new()
            .name("engine".into())
            .spawn(move || {
                let embedder = match Embedder::load(&model_dir) {
                    Ok(embedder) => embedder,
                    Err(error) => {
                        let _ = loaded_tx.send(Err(error));
                        return;
                    }
                };
                thread_gauges.publish_memory();
                let _ = loaded_tx.send(Ok((
                    ModelInfo {
                        dir: embedder.dir.clone(),
                        weight_bytes: embedder.weight_bytes,
                        context_length: embedder.max_tokens,
                        load_time: embedder.load_time,
                    },
                    embedder.kind(),
                )));
                serve_batches(&embedder, &queue, &thread_gauges, max_batch_tokens);
            })
            .map_err(EncoderEngineError::Spawn)?;
        let (info, kind) = loaded_rx
            .recv()
            .map_err(|_| EncoderEngineError::Stopped)??;
        Ok(Self {
            jobs,
            gauges,
            thread: Some(thread),
            info,
            kind,
        })
    }

    /// Queues a request; its answer goes to its `reply`.
    pub fn submit(&self, job: EncodeJob) -> Result<(), EncoderEngineError> {
        self.jobs.send(job).map_err(|_| EncoderEngineError::Stopped)
    }

    /// Runs `work` and waits for its answer (for tests and benches).
    pub fn run(&self, id: u64, work: Work) -> Result<FromWorker, EncoderEngineError> {
        let (answer, answered) = mpsc::channel();
        self.submit(EncodeJob {
            id,
            work,
            cancel: Arc::new(AtomicBool::new(false)),
            reply: Box::new(move |message| {
                let _ = answer.send(message);
            }),
        })?;
        answered.recv().map_err(|_| EncoderEngineError::Stopped)
    }

    pub fn memory(&self) -> MemorySnapshot {
        self.gauges.memory()
    }

    /// Requests in progress (`running`) and not yet started (`waiting`).
    pub fn occupancy(&self) -> Occupancy {
        self.gauges.occupancy()
    }
}

impl Drop for EncoderEngine {
    /// Closing the queue ends the thread once the waiting requests are answered; joining keeps
    /// MLX teardown on it.
    fn drop(&mut self) {
        let (closed, _) = mpsc::channel();
        self.jobs = closed;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A request in the batcher: what its answer needs.
struct Pending {
    id: u64,
    rerank: bool,
    dimensions: Option<u32>,
    prompt_tokens: u32,
    cancel: Arc<AtomicBool>,
    reply: Reply,
}

fn serve_batches(
    embedder: &Embedder,
    queue: &mpsc::Receiver<EncodeJob>,
    gauges: &Gauges,
    max_batch_tokens: usize,
) {
    let mut batcher: Batcher<Pending> = Batcher::new(max_batch_tokens);
    let mut open = true;
    loop {
        if batcher.is_empty() {
            match queue.recv() {
                Ok(job) => accept(embedder, &mut batcher, job),
                Err(mpsc::RecvError) => return,
            }
        }
        while open {
            match queue.try_recv() {
                Ok(job) => accept(embedder, &mut batcher, job),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => open = false,
            }
        }
        let cancelled = batcher.remove_where(|pending| pending.cancel.load(Ordering::Relaxed));
        publish(gauges, &batcher);
        for pending in cancelled {
            (pending.reply)(FromWorker::Error {
                id: pending.id,
                message: "cancelled".to_owned(),
            });
        }
        let answers = run_one_batch(embedder, &mut batcher);
        // Published before the answers leave, so stats asked for after one count it out.
        publish(gauges, &batcher);
        gauges.publish_memory();
        for (reply, message) in answers {
            reply(message);
        }
        if !open && batcher.is_empty() {
            return;
        }
    }
}

fn publish(gauges: &Gauges, batcher: &Batcher<Pending>) {
    let (running, waiting) = batcher.counts();
    gauges.publish_occupancy(running as u64, waiting as u64);
}

/// Checks and tokenizes a request; a refused or empty one is answered at once.
fn accept(embedder: &Embedder, batcher: &mut Batcher<Pending>, job: EncodeJob) {
    let (prepared, rerank, dimensions) = match &job.work {
        Work::Embed(request) => (embedder.prepare_embed(request), false, request.dimensions),
        Work::Rerank(request) => (embedder.prepare_rerank(request), true, None),
    };
    let items = match prepared {
        Ok(items) => items,
        Err(rejection) => {
            return (job.reply)(FromWorker::Rejected {
                id: job.id,
                kind: rejection.kind,
                message: rejection.message,
                param: rejection.param,
                overflow: None,
            });
        }
    };
    let tokens: usize = items.iter().map(|item| item.ids.len()).sum();
    let pending = Pending {
        id: job.id,
        rerank,
        dimensions,
        prompt_tokens: u32::try_from(tokens).unwrap_or(u32::MAX),
        cancel: job.cancel,
        reply: job.reply,
    };
    if items.is_empty() {
        let (reply, message) = answer(embedder, pending, Vec::new());
        reply(message);
    } else {
        batcher.push(pending, items);
    }
}

/// Runs the next batch; returns the requests it completed (or failed) with their answers.
fn run_one_batch(embedder: &Embedder, batcher: &mut Batcher<Pending>) -> Vec<(Reply, FromWorker)> {
    let batch = batcher.next_batch();
    if batch.is_empty() {
        return Vec::new();
    }
    let (rows, items): (Vec<_>, Vec<&Item>) = batch.into_iter().unzip();
    match embedder.run(&items) {
        Ok(outputs) => batcher
            .complete(&rows, outputs)
            .into_iter()
            .map(|(pending, outputs)| answer(embedder, pending, outputs))
            .collect(),
        Err(error) => {
            tracing::error!(%error, model = %embedder.dir.display(), "encoder batch failed");
            batcher
                .fail(&rows)
                .into_iter()
                .map(|pending| {
                    let message = FromWorker::Error {
                        id: pending.id,
                        message: format!("{}: the encoder failed: {error}", embedder.dir.display()),
                    };
                    (pending.reply, message)
                })
                .collect()
        }
    }
}

/// A completed request's reply and its answer.
fn answer(embedder: &Embedder, pending: Pending, outputs: Vec<Vec<f32>>) -> (Reply, FromWorker) {
    let Pending {
        id,
        rerank,
        dimensions,
        prompt_tokens,
        reply,
        ..
    } = pending;
    let message = if rerank {
        FromWorker::Scores {
            id,
            scores: outputs
                .into_iter()
                .map(|score| score.first().copied().unwrap_or(f32::NAN))
                .collect(),
            prompt_tokens,
        }
    } else {
        FromWorker::Embeddings {
            id,
            vectors: outputs
                .into_iter()
                .map(|vector| embedder.finish(vector, dimensions))
                .collect(),
            prompt_tokens,
        }
    };
    (reply, message)
}
