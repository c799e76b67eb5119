//! `corral-worker serve`: the worker as the supervisor starts it.
//!
//! It connects to the socket the supervisor created, proves itself with the one-time token from
//! `CORRAL_WORKER_TOKEN` (kept out of argv, where `ps` would show it), loads the model on the
//! engine thread, reports `Ready`, and then serves frames until the supervisor says `Shutdown` or
//! the connection closes: a worker never outlives its supervisor's connection.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use corral_ipc::{
    FromWorker, ModelKind, RejectKind, ToWorker, WORKER_TOKEN_ENV, WorkerStats, worker_handshake,
};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use crate::describe::describe;
use crate::embedding::engine::{EncodeJob, EncoderEngine, Work};
use crate::engine::{Engine, EngineOptions, MemorySnapshot, ModelInfo, Occupancy};
use crate::load_failure::LoadFailure;
use crate::process_memory::peak_resident_bytes;
use crate::wire::{Ending, to_wire_event};

/// Requests waiting beyond this are refused as `Overloaded` rather than queued without bound.
const MAX_QUEUED: usize = 64;

/// How long the writer may take to flush the last frames once serving has ended.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

pub fn run(model: PathBuf, socket: PathBuf, options: EngineOptions) -> Result<()> {
    exit_with_parent();
    let token = std::env::var(WORKER_TOKEN_ENV)
        .with_context(|| format!("{WORKER_TOKEN_ENV} is not set"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the I/O runtime")?;
    runtime.block_on(serve(model, socket, token, options))
}

/// On Linux the kernel also ends the worker if the supervisor dies without closing the socket
/// (macOS has no such signal; there the closed connection is what ends it).
pub fn exit_with_parent() {
    #[cfg(target_os = "linux")]
    if let Err(error) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL) {
        tracing::warn!(%error, "cannot ask for a parent-death signal");
    }
}

/// The engine a worker runs: the decoder's batch for a chat model, the encoder's batcher for an
/// embedding or rerank model (decided by `describe`'s kind, as the supervisor's registry is).
enum Served {
    Chat(Engine),
    Encoder(EncoderEngine),
}

impl Served {
    fn start(model: PathBuf, options: EngineOptions) -> Result<Self, LoadFailure> {
        match describe(&model).kind {
            ModelKind::Chat => Engine::start_with(model, options)
                .map(Self::Chat)
                .map_err(LoadFailure::of),
            ModelKind::Embedding | ModelKind::Rerank => EncoderEngine::start(model)
                .map(Self::Encoder)
                .map_err(LoadFailure::of),
        }
    }

    fn info(&self) -> &ModelInfo {
        match self {
            Self::Chat(engine) => &engine.info,
            Self::Encoder(engine) => &engine.info,
        }
    }

    fn memory(&self) -> MemorySnapshot {
        match self {
            Self::Chat(engine) => engine.memory(),
            Self::Encoder(engine) => engine.memory(),
        }
    }

    fn occupancy(&self) -> Occupancy {
        match self {
            Self::Chat(engine) => engine.occupancy(),
            Self::Encoder(engine) => engine.occupancy(),
        }
    }
}

/// Requests in flight, for cancellation and for the stats.
#[derive(Default)]
struct Sequences {
    cancel_flags: Mutex<HashMap<u64, Arc<AtomicBool>>>,
    completed: AtomicU64,
    cancelled: AtomicU64,
}

async fn serve(
    model: PathBuf,
    socket: PathBuf,
    token: String,
    options: EngineOptions,
) -> Result<()> {
    let stream = UnixStream::connect(&socket)
        .await
        .with_context(|| format!("connecting to {}", socket.display()))?;
    let connection = worker_handshake(stream, &token)
        .await
        .with_context(|| format!("handshake on {}", socket.display()))?;
    let (mut reader, mut writer) = connection.into_split();

    let model_dir = model.clone();
    let memory_limit = options.memory_limit;
    let started = tokio::task::spawn_blocking(move || Served::start(model_dir, options))
        .await
        .context("the model loader panicked")?;
    let engine = match started {
        Ok(engine) => engine,
        Err(LoadFailure { message, permanent }) => {
            writer
                .write_frame(&FromWorker::LoadFailed {
                    message: message.clone(),
                    permanent,
                })
                .await
                .context("reporting the load failure")?;
            bail!("{message}");
        }
    };
    let info = engine.info();
    writer
        .write_frame(&FromWorker::Ready {
            load_time_ms: info.load_time.as_millis() as u64,
            weight_bytes: info.weight_bytes as u64,
            context_length: u32::try_from(info.context_length).unwrap_or(u32::MAX),
            model_dir: info.dir.display().to_string(),
        })
        .await
        .context("reporting ready")?;
    tracing::info!(model = %model.display(), ?memory_limit, "ready");

    let (outbox, mut outgoing) = mpsc::unbounded_channel::<FromWorker>();
    let writer_task = tokio::spawn(async move {
        while let Some(message) = outgoing.recv().await {
            if let Err(error) = writer.write_frame(&message).await {
                tracing::warn!(%error, "the supervisor connection failed; stopping");
                break;
            }
        }
    });

    let sequences = Arc::new(Sequences::default());
    loop {
        let message = match reader.read_frame().await {
            Ok(Some(message)) => message,
            Ok(None) => {
                tracing::info!("the supervisor closed the connection; exiting");
                break;
            }
            Err(error) => {
                tracing::error!(%error, "bad frame from the supervisor; closing the connection");
                break;
            }
        };
        match (message, &engine) {
            (ToWorker::Generate { id, request }, Served::Chat(engine)) => {
                submit(engine, &sequences, &outbox, id, request);
            }
            (ToWorker::Embed { id, request }, Served::Encoder(engine)) => {
                submit_encode(engine, &sequences, &outbox, id, Work::Embed(request));
            }
            (ToWorker::Rerank { id, request }, Served::Encoder(engine)) => {
                submit_encode(engine, &sequences, &outbox, id, Work::Rerank(request));
            }
            (
                ToWorker::Generate { id, .. }
                | ToWorker::Embed { id, .. }
                | ToWorker::Rerank { id, .. },
                _,
            ) => {
                let serves = match &engine {
                    Served::Chat(_) => "a chat model",
                    Served::Encoder(encoder) if encoder.kind == ModelKind::Rerank => {
                        "a rerank model"
                    }
                    Served::Encoder(_) => "an embedding model",
                };
                let _ = outbox.send(FromWorker::Rejected {
                    id,
                    kind: RejectKind::Unsupported,
                    message: format!("{} is {serves}", model.display()),
                    param: None,
                    overflow: None,
                });
            }
            (ToWorker::Cancel { id }, _) => {
                if let Some(flag) = lock(&sequences.cancel_flags).get(&id) {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            (ToWorker::GetStats, _) => {
                let _ = outbox.send(FromWorker::Stats(stats(&engine, &sequences)));
            }
            (ToWorker::Shutdown, _) => {
                tracing::info!("shutdown requested");
                break;
            }
            (other @ (ToWorker::Welcome | ToWorker::Refused { .. }), _) => {
                tracing::warn!(
                    message = other.name(),
                    "unexpected frame after the handshake"
                );
            }
        }
    }

    for flag in lock(&sequences.cancel_flags).values() {
        flag.store(true, Ordering::Relaxed);
    }
    // Dropping the engine joins its thread once the cancelled job in hand has stopped, so MLX
    // is torn down on the thread that owns it.
    tokio::task::spawn_blocking(move || drop(engine))
        .await
        .context("stopping the engine")?;
    drop(outbox);
    let _ = tokio::time::timeout(FLUSH_TIMEOUT, writer_task).await;
    Ok(())
}

fn submit(
    engine: &Engine,
    sequences: &Arc<Sequences>,
    outbox: &mpsc::UnboundedSender<FromWorker>,
    id: u64,
    request: Box<corral_ipc::GenerateRequest>,
) {
    let refuse = |kind, message: String| send_rejection(outbox, id, kind, message);
    if lock(&sequences.cancel_flags).len() >= MAX_QUEUED {
        return refuse(
            RejectKind::Overloaded,
            format!("{MAX_QUEUED} requests are already queued on this worker"),
        );
    }
    let sink_outbox = outbox.clone();
    let sink_sequences = sequences.clone();
    let sink = Box::new(move |event| {
        let (message, ending) = to_wire_event(id, event);
        if let Some(ending) = ending {
            lock(&sink_sequences.cancel_flags).remove(&id);
            let counter = match ending {
                Ending::Completed => Some(&sink_sequences.completed),
                Ending::Cancelled => Some(&sink_sequences.cancelled),
                Ending::Rejected => None,
            };
            if let Some(counter) = counter {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        let _ = sink_outbox.send(message);
    });
    // The flag is registered before the job can finish, so a quick job cannot leave it behind.
    let mut flags = lock(&sequences.cancel_flags);
    match engine.submit_wire(request, sink) {
        Ok(flag) => {
            flags.insert(id, flag);
        }
        Err(error) => {
            drop(flags);
            refuse(RejectKind::ShuttingDown, error.to_string());
        }
    }
}

/// Queues an embedding or rerank request; its answer (or its silence, when cancelled) ends it.
fn submit_encode(
    engine: &EncoderEngine,
    sequences: &Arc<Sequences>,
    outbox: &mpsc::UnboundedSender<FromWorker>,
    id: u64,
    work: Work,
) {
    let refuse = |kind, message: String| send_rejection(outbox, id, kind, message);
    if lock(&sequences.cancel_flags).len() >= MAX_QUEUED {
        return refuse(
            RejectKind::Overloaded,
            format!("{MAX_QUEUED} requests are already queued on this worker"),
        );
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let reply_outbox = outbox.clone();
    let reply_sequences = sequences.clone();
    let reply_cancel = cancel.clone();
    let reply = Box::new(move |message: FromWorker| {
        lock(&reply_sequences.cancel_flags).remove(&id);
        let counter = match &message {
            FromWorker::Embeddings { .. } | FromWorker::Scores { .. } => {
                Some(&reply_sequences.completed)
            }
            FromWorker::Error { .. } if reply_cancel.load(Ordering::Relaxed) => {
                Some(&reply_sequences.cancelled)
            }
            _ => None,
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let _ = reply_outbox.send(message);
    });
    // The flag is registered before the job can finish, so a quick job cannot leave it behind.
    let mut flags = lock(&sequences.cancel_flags);
    flags.insert(id, cancel.clone());
    let submitted = engine.submit(EncodeJob {
        id,
        work,
        cancel,
        reply,
    });
    if let Err(error) = submitted {
        flags.remove(&id);
        drop(flags);
        refuse(RejectKind::ShuttingDown, error.to_string());
    }
}

/// Answers request `id` with `Rejected`, naming no field.
fn send_rejection(
    outbox: &mpsc::UnboundedSender<FromWorker>,
    id: u64,
    kind: RejectKind,
    message: String,
) {
    let _ = outbox.send(FromWorker::Rejected {
        id,
        kind,
        message,
        param: None,
        overflow: None,
    });
}

fn stats(engine: &Served, sequences: &Sequences) -> WorkerStats {
    let memory = engine.memory();
    let occupancy = engine.occupancy();
    let count = |value: u64| u32::try_from(value).unwrap_or(u32::MAX);
    WorkerStats {
        pid: std::process::id(),
        active_sequences: count(occupancy.running),
        queued_requests: count(occupancy.waiting),
        completed: sequences.completed.load(Ordering::Relaxed),
        cancelled: sequences.cancelled.load(Ordering::Relaxed),
        mlx_active_bytes: memory.active,
        mlx_cache_bytes: memory.cache,
        mlx_peak_bytes: memory.peak,
        resident_bytes: peak_resident_bytes().unwrap_or(0),
        prefix_cache: match engine {
            Served::Chat(engine) => engine.prefix_stats(),
            Served::Encoder(_) => None,
        },
    }
}

/// A poisoned lock only means another thread panicked mid-update of a plain map; keep serving.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
