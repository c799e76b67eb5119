//! The engine thread: the one thread that owns all MLX state of this worker.
//!
//! Requests queue on a channel and run one after another, so two computations never overlap on
//! the device, and a cancelled request has finished its last MLX call before the next one starts.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;

use corral_ipc::PrefixCacheStats;

use crate::generation::{Event, GenerateError, GenerateRequest, Limits, generate};
use crate::loaded::{LoadError, LoadedModel};
use crate::prefix_cache::{PrefixCache, PrefixCacheOptions, PrefixCounters};

/// How long the engine waits at shutdown for the SSD writer to persist queued blocks.
const SHUTDOWN_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// What a worker runs with besides its model.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// Refuse prefills that would take MLX's active memory past this many bytes.
    pub memory_limit: Option<u64>,
    pub prefix_cache: Option<PrefixCacheOptions>,
}

/// What the engine tells about a loaded model.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub dir: PathBuf,
    pub weight_bytes: usize,
    pub context_length: usize,
    pub load_time: std::time::Duration,
}

/// Where a job's events go; called on the engine thread, so it must not block.
pub type EventSink = Box<dyn FnMut(Result<Event, GenerateError>) + Send>;

struct Job {
    request: GenerateRequest,
    cancel: Arc<AtomicBool>,
    sink: EventSink,
}

/// MLX's memory figures, published by the engine thread after each request (reading them is
/// an MLX call, so no other thread may).
#[derive(Debug, Default)]
struct MemoryGauges {
    active: AtomicU64,
    cache: AtomicU64,
    peak: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemorySnapshot {
    pub active: u64,
    pub cache: u64,
    pub peak: u64,
}

impl MemoryGauges {
    fn publish(&self) {
        let read = |value: Result<usize, _>| value.map_or(0, |bytes: usize| bytes as u64);
        self.active
            .store(read(mlx_rs::memory::active_memory()), Ordering::Relaxed);
        self.cache
            .store(read(mlx_rs::memory::cache_memory()), Ordering::Relaxed);
        self.peak
            .store(read(mlx_rs::memory::peak_memory()), Ordering::Relaxed);
    }
}

pub struct Engine {
    jobs: mpsc::Sender<Job>,
    memory: Arc<MemoryGauges>,
    prefix: Option<Arc<PrefixCounters>>,
    thread: Option<thread::JoinHandle<()>>,
    pub info: ModelInfo,
}

/// A submitted request: its events, and the flag that cancels it at the next token.
pub struct Submission {
    pub events: mpsc::Receiver<Result<Event, GenerateError>>,
    pub cancel: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("cannot start the engine thread: {0}")]
    Spawn(std::io::Error),
    #[error("the engine thread has stopped")]
    Stopped,
}

impl Engine {
    /// Starts the engine thread and loads the model on it; returns once loading ended.
    pub fn start(model_dir: PathBuf) -> Result<Self, EngineError> {
        Self::start_with(model_dir, EngineOptions::default())
    }

    /// As [`Engine::start`], with a memory limit for prefills (see `prefill_guard`) and a prefix
    /// cache.
    pub fn start_with(model_dir: PathBuf, options: EngineOptions) -> Result<Self, EngineError> {
        let (jobs, job_queue) = mpsc::channel::<Job>();
        let (loaded_tx, loaded_rx) = mpsc::channel();
        let memory = Arc::new(MemoryGauges::default());
        let gauges = memory.clone();
        let prefix_counters = Arc::new(PrefixCounters::default());
        let counters = prefix_counters.clone();
        let prefix_enabled = options.prefix_cache.is_some();
        let thread = thread::Builder::new()
            .name("engine".into())
            .spawn(move || {
                let loaded = match LoadedModel::load(&model_dir) {
                    Ok(loaded) => loaded,
                    Err(error) => {
                        let _ = loaded_tx.send(Err(error));
                        return;
                    }
                };
                let mut prefix = options.prefix_cache.as_ref().and_then(|prefix_options| {
                    PrefixCache::open(&loaded, prefix_options, counters)
                        .inspect_err(|error| {
                            tracing::warn!(%error, "prefix cache unavailable; serving without it");
                        })
                        .ok()
                });
                // Published before the load is reported, so stats asked for after Ready show it.
                gauges.publish();
                let _ = loaded_tx.send(Ok(ModelInfo {
                    dir: loaded.dir.clone(),
                    weight_bytes: loaded.model.weight_bytes(),
                    context_length: loaded.model.config.max_position_embeddings,
                    load_time: loaded.load_time,
                }));
                run_jobs(
                    &loaded,
                    options.memory_limit,
                    prefix.as_mut(),
                    job_queue,
                    &gauges,
                );
                if let Some(prefix) = &prefix
                    && !prefix.flush(SHUTDOWN_FLUSH)
                {
                    tracing::warn!("prefix cache: the SSD writer did not finish within the bound");
                }
            })
            .map_err(EngineError::Spawn)?;
        let info = loaded_rx.recv().map_err(|_| EngineError::Stopped)??;
        Ok(Self {
            jobs,
            memory,
            prefix: prefix_enabled.then_some(prefix_counters),
            thread: Some(thread),
            info,
        })
    }

    /// The prefix cache's counters, when it has one.
    pub fn prefix_stats(&self) -> Option<PrefixCacheStats> {
        self.prefix.as_ref().map(|counters| counters.snapshot())
    }

    pub fn memory(&self) -> MemorySnapshot {
        MemorySnapshot {
            active: self.memory.active.load(Ordering::Relaxed),
            cache: self.memory.cache.load(Ordering::Relaxed),
            peak: self.memory.peak.load(Ordering::Relaxed),
        }
    }

    /// Queues a request whose events are collected on a channel.
    pub fn submit(&self, request: GenerateRequest) -> Result<Submission, EngineError> {
        let (events, receiver) = mpsc::channel();
        let cancel = self.submit_to(
            request,
            Box::new(move |event| {
                // A requester that went away just stops listening; its cancel flag ends the work.
                let _ = events.send(event);
            }),
        )?;
        Ok(Submission {
            events: receiver,
            cancel,
        })
    }

    /// Queues a request whose events go to `sink`; returns its cancel flag.
    pub fn submit_to(
        &self,
        request: GenerateRequest,
        sink: EventSink,
    ) -> Result<Arc<AtomicBool>, EngineError> {
        let cancel = Arc::new(AtomicBool::new(false));
        self.jobs
            .send(Job {
                request,
                cancel: cancel.clone(),
                sink,
            })
            .map_err(|_| EngineError::Stopped)?;
        Ok(cancel)
    }
}

impl Drop for Engine {
    /// Closing the queue ends the thread after the job in hand; joining keeps MLX teardown on it.
    fn drop(&mut self) {
        let (closed, _) = mpsc::channel();
        self.jobs = closed;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run_jobs(
    loaded: &LoadedModel,
    memory_limit: Option<u64>,
    mut prefix: Option<&mut PrefixCache>,
    jobs: mpsc::Receiver<Job>,
    gauges: &MemoryGauges,
) {
    for mut job in jobs {
        let limits = Limits {
            memory: memory_limit,
            prefix: prefix.as_deref_mut(),
        };
        let result = generate(loaded, &job.request, limits, &job.cancel, |event| {
            (job.sink)(Ok(event))
        });
        if let Err(error) = result {
            (job.sink)(Err(error));
        }
        gauges.publish();
    }
}
