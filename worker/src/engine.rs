//! The engine thread: the one thread that owns all MLX state of this worker.
//!
//! Requests arrive on a channel and join the batch (`batch.rs`), which the thread steps while it
//! has work: all computation happens on this one thread, so two passes never overlap on the
//! device, and a cancelled sequence has finished its last MLX call when it leaves the batch.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;

use corral_ipc::PrefixCacheStats;

use corral_ipc::GenerateRequest as WireRequest;

use crate::batch::{Batch, BatchLimits, Job};
use crate::distributed::{Group, Member};
use crate::generation::{Event, GenerateError, GenerateRequest};
use crate::gguf;
use crate::loaded::{LoadError, LoadedModel};
use crate::lockstep;
use crate::prefix_cache::{PrefixCache, PrefixCacheOptions, PrefixCounters};
use crate::speculation::{Method, draft, method_where_it_pays};
use crate::wire::to_generate_request;

/// How long the engine waits at shutdown for the SSD writer to persist queued blocks.
const SHUTDOWN_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// What a worker runs with besides its model.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// Refuse prefills that would take MLX's active memory past this many bytes.
    pub memory_limit: Option<u64>,
    pub batch: BatchLimits,
    pub prefix_cache: Option<PrefixCacheOptions>,
    /// How a GGUF's quantized tensors are loaded.
    pub gguf: gguf::Choices,
    /// A GGUF's vision projector (`mmproj`), where discovery found one beside it.
    pub projector: Option<PathBuf>,
    /// The draft model that guesses tokens ahead, for `speculative = "draft"` and for requests
    /// that ask for it.
    pub draft: Option<PathBuf>,
    /// How sequences guess ahead unless their request says; `None`: the way that pays for the
    /// loaded model on this device ([`method_where_it_pays`]). It replaces `batch`'s method.
    pub speculative: Option<Method>,
    /// The group whose rank 0 this worker is, when the model is spread over several ranks
    /// (`lockstep.rs`); the others run [`follow`].
    pub group: Option<Member>,
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

struct Submitted {
    request: GenerateRequest,
    /// The request as the supervisor sent it, which a group's rank 0 passes on to the others.
    wire: Option<Box<WireRequest>>,
    cancel: Arc<AtomicBool>,
    sink: EventSink,
}

/// MLX's memory figures and the batch's occupancy, published by the engine thread after each
/// step (reading MLX's figures is an MLX call, so no other thread may).
#[derive(Debug, Default)]
pub(crate) struct Gauges {
    active: AtomicU64,
    cache: AtomicU64,
    peak: AtomicU64,
    running: AtomicU64,
    waiting: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemorySnapshot {
    pub active: u64,
    pub cache: u64,
    pub peak: u64,
}

/// How full the batch is: sequences in it and requests waiting for a slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    pub running: u64,
    pub waiting: u64,
}

impl Gauges {
    /// Steps `batch`, publishing its occupancy before and after, and MLX's memory figures.
    fn step(&self, batch: &mut Batch<'_, '_, '_>) {
        self.publish_batch(batch);
        batch.step();
        self.publish_batch(batch);
        self.publish_memory();
    }

    fn publish_batch(&self, batch: &Batch<'_, '_, '_>) {
        self.publish_occupancy(batch.running() as u64, batch.waiting() as u64);
    }

    /// Moves one request between the gauges (never below zero).
    fn move_occupancy(&self, waiting: i64, running: i64) {
        let shift = |gauge: &AtomicU64, by: i64| {
            let _ = gauge.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |value| {
                Some(value.saturating_add_signed(by))
            });
        };
        shift(&self.waiting, waiting);
        shift(&self.running, running);
    }

    pub(crate) fn publish_occupancy(&self, running: u64, waiting: u64) {
        self.running.store(running, Ordering::Relaxed);
        self.waiting.store(waiting, Ordering::Relaxed);
    }

    pub(crate) fn memory(&self) -> MemorySnapshot {
        MemorySnapshot {
            active: self.active.load(Ordering::Relaxed),
            cache: self.cache.load(Ordering::Relaxed),
            peak: self.peak.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn occupancy(&self) -> Occupancy {
        Occupancy {
            running: self.running.load(Ordering::Relaxed),
            waiting: self.waiting.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn publish_memory(&self) {
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
    jobs: mpsc::Sender<Submitted>,
    /// Whether other ranks step with this one, which then passes each request on as sent.
    grouped: bool,
    gauges: Arc<Gauges>,
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
    #[error("a worker group's rank 0 passes requests on as the supervisor sent them (submit_wire)")]
    NotAsSent,
}

impl Engine {
    /// Starts the engine thread and loads the model on it; returns once loading ended.
    pub fn start(model_dir: PathBuf) -> Result<Self, EngineError> {
        Self::start_with(model_dir, EngineOptions::default())
    }

    /// As [`Engine::start`], with a memory limit for prefills (see `prefill_guard`) and a prefix
    /// cache.
    pub fn start_with(model_dir: PathBuf, options: EngineOptions) -> Result<Self, EngineError> {
        let (jobs, job_queue) = mpsc::channel::<Submitted>();
        let (loaded_tx, loaded_rx) = mpsc::channel();
        let gauges = Arc::new(Gauges::default());
        let thread_gauges = gauges.clone();
        let prefix_counters = Arc::new(PrefixCounters::default());
        let counters = prefix_counters.clone();
        let prefix_enabled = options.prefix_cache.is_some();
        let grouped = options.group.is_some();
        let thread = thread::Builder::new()
            .name("engine".into())
            .spawn(move || {
                let loaded = LoadedModel::load_with(
                    &model_dir,
                    options.gguf,
                    options.projector.as_deref(),
                    options.group.clone(),
                );
                // Rank 0 reports for the whole group, so it hears how every rank's load went.
                let loaded = match (loaded, &options.group) {
                    (Ok(loaded), Some(member)) => match loaded_everywhere(&member.group, true) {
                        Ok(()) => Ok(loaded),
                        Err(error) => Err(LoadError::Group(error)),
                    },
                    (Err(error), Some(member)) => {
                        let _ = loaded_everywhere(&member.group, false);
                        Err(error)
                    }
                    (loaded, None) => loaded,
                };
                let loaded = match loaded {
                    Ok(loaded) => loaded,
                    Err(error) => {
                        let _ = loaded_tx.send(Err(error));
                        return;
                    }
                };
                let limits = batch_limits(&loaded, &options);
                let draft = match load_draft(&loaded, &options, limits.speculation.method) {
                    Ok(draft) => draft,
                    Err(error) => {
                        let _ = loaded_tx.send(Err(error));
                        return;
                    }
                };
                let mut prefix = open_prefix_cache(&loaded, &options, counters);
                // Published before the load is reported, so stats asked for after Ready show it.
                thread_gauges.publish_memory();
                let _ = loaded_tx.send(Ok(ModelInfo {
                    dir: loaded.dir.clone(),
                    weight_bytes: loaded.model.weight_bytes(),
                    context_length: loaded.model.config.max_position_embeddings,
                    load_time: loaded.load_time,
                }));
                let mut batch = Batch::new(&loaded, limits, options.memory_limit, prefix.as_mut());
                if let Some(draft) = &draft {
                    batch = batch.with_draft(draft);
                }
                match &options.group {
                    Some(member) => lead(batch, &job_queue, &thread_gauges, &member.group),
                    None => run_batch(batch, &job_queue, &thread_gauges),
                }
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
            grouped,
            gauges,
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
        self.gauges.memory()
    }

    /// The batch as of its last step.
    pub fn occupancy(&self) -> Occupancy {
        self.gauges.occupancy()
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
        self.queue(request, None, sink)
    }

    /// Queues a request as the supervisor sent it, whose events go to `sink`; returns its
    /// cancel flag.
    pub fn submit_wire(
        &self,
        request: Box<WireRequest>,
        sink: EventSink,
    ) -> Result<Arc<AtomicBool>, EngineError> {
        let wire = self.grouped.then(|| request.clone());
        self.queue(to_generate_request(request), wire, sink)
    }

    fn queue(
        &self,
        request: GenerateRequest,
        wire: Option<Box<WireRequest>>,
        sink: EventSink,
    ) -> Result<Arc<AtomicBool>, EngineError> {
        if self.grouped && wire.is_none() {
            return Err(EngineError::NotAsSent);
        }
        let cancel = Arc::new(AtomicBool::new(false));
        self.jobs
            .send(Submitted {
                request,
                wire,
                cancel: cancel.clone(),
                sink,
            })
            .map_err(|_| EngineError::Stopped)?;
        Ok(cancel)
    }
}

impl Drop for Engine {
    /// Closing the queue ends the thread once its batch is empty; joining keeps MLX teardown on
    /// it.
    fn drop(&mut self) {
        let (closed, _) = mpsc::channel();
        self.jobs = closed;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The batch's limits for `loaded`, its sequences guessing the configured way or else the way
/// that pays.
fn batch_limits(loaded: &LoadedModel, options: &EngineOptions) -> BatchLimits {
    let mut limits = options.batch;
    limits.speculation.method = options
        .speculative
        .unwrap_or_else(|| method_where_it_pays(loaded.model.new_mtp_cache().is_some()));
    limits
}

/// The prefix cache, where one is asked for. Each rank of a group keeps its own part (a pipeline
/// rank its layers, a tensor-parallel rank its slice of every layer), and the group serves
/// without one unless every rank opened its own.
fn open_prefix_cache(
    loaded: &LoadedModel,
    options: &EngineOptions,
    counters: Arc<PrefixCounters>,
) -> Option<PrefixCache> {
    let prefix_options = options.prefix_cache.as_ref()?;
    let opened = PrefixCache::open(loaded, prefix_options, counters)
        .inspect_err(|error| {
            tracing::warn!(%error, "prefix cache unavailable; serving without it");
        })
        .ok();
    match &options.group {
        Some(member) if !member.group.all_agree(u32::from(opened.is_some())) => None,
        _ => opened,
    }
}

/// Tells every rank of `group` whether this one `loaded` its share, once all have tried; which
/// ranks did not, if any did not.
fn loaded_everywhere(group: &Group, loaded: bool) -> Result<(), String> {
    let flags = group
        .all_gather(&mlx_rs::Array::from_slice(&[i32::from(loaded)], &[1]))
        .and_then(|flags| flags.eval().map(|()| flags))
        .map_err(|error| {
            format!("the ranks could not tell each other how their loads went: {error}")
        })?;
    let failed: Vec<usize> = flags
        .as_slice::<i32>()
        .iter()
        .enumerate()
        .filter(|(_, loaded)| **loaded == 0)
        .map(|(rank, _)| rank)
        .collect();
    match failed.as_slice() {
        [] => Ok(()),
        ranks => Err(format!(
            "rank {ranks:?} could not load its share of the model (its log says why)"
        )),
    }
}

/// The draft model, where one is named: its load failing fails the model's, as the operator
/// asked for it. Each rank of a group loads it whole and runs it alike, so every rank guesses
/// the same tokens; the ranks load it or fail together.
fn load_draft(
    loaded: &LoadedModel,
    options: &EngineOptions,
    method: Method,
) -> Result<Option<LoadedModel>, LoadError> {
    let draft = load_draft_here(loaded, options, method);
    match &options.group {
        Some(member) if !member.group.all_agree(u32::from(draft.is_ok())) => draft.and(Err(
            LoadError::Group("a rank could not load the draft model (its log says why)".to_owned()),
        )),
        _ => draft,
    }
}

fn load_draft_here(
    loaded: &LoadedModel,
    options: &EngineOptions,
    method: Method,
) -> Result<Option<LoadedModel>, LoadError> {
    let Some(path) = &options.draft else {
        return match method {
            Method::Draft => Err(LoadError::NoDraft),
            _ => Ok(None),
        };
    };
    let draft = LoadedModel::load_with(path, options.gguf, None, None).map_err(|source| {
        LoadError::Draft {
            path: path.clone(),
            source: Box::new(source),
        }
    })?;
    match draft::incompatibility(loaded, &draft) {
        Some(reason) => Err(LoadError::DraftMismatch {
            path: path.clone(),
            reason,
        }),
        None => Ok(Some(draft)),
    }
}

/// Steps the batch while it has work; waits for a request when it has none. Ends when the
/// queue is closed and the batch has finished what it holds.
fn run_batch(mut batch: Batch<'_, '_, '_>, jobs: &mpsc::Receiver<Submitted>, gauges: &Arc<Gauges>) {
    let mut open = true;
    loop {
        for submitted in arrivals(jobs, batch.is_idle(), &mut open) {
            batch.submit(job(submitted, gauges));
        }
        if !open && batch.is_idle() {
            return;
        }
        gauges.step(&mut batch);
    }
}

/// The requests queued since the last step, waiting for one while the batch is `idle`; `open`
/// turns false once the queue has closed.
fn arrivals(jobs: &mpsc::Receiver<Submitted>, idle: bool, open: &mut bool) -> Vec<Submitted> {
    let mut arrivals = Vec::new();
    if idle && *open {
        match jobs.recv() {
            Ok(submitted) => arrivals.push(submitted),
            Err(mpsc::RecvError) => *open = false,
        }
    }
    while *open {
        match jobs.try_recv() {
            Ok(submitted) => arrivals.push(submitted),
            Err(mpsc::TryRecvError::Empty) => break,
            Err(mpsc::TryRecvError::Disconnected) => *open = false,
        }
    }
    arrivals
}

/// Rank 0's engine loop: each step begins with the round it tells the other ranks. Ends when
/// the queue has closed and the batch has finished what it holds.
fn lead(
    mut batch: Batch<'_, '_, '_>,
    jobs: &mpsc::Receiver<Submitted>,
    gauges: &Arc<Gauges>,
    group: &Group,
) {
    let mut agreed = lockstep::Agreed::default();
    let mut next_id = 0;
    let mut open = true;
    loop {
        let arrivals = arrivals(jobs, batch.is_idle(), &mut open);
        let mut round = lockstep::Round {
            cancelled: agreed.newly_cancelled(),
            closing: !open,
            ..lockstep::Round::default()
        };
        let mut jobs_now = Vec::new();
        for submitted in arrivals {
            let (
                id,
                Submitted {
                    mut request,
                    wire,
                    cancel,
                    sink,
                },
            ) = (next_id, submitted);
            next_id += 1;
            // `Engine::queue` lets no request in without it.
            let Some(mut wire) = wire else {
                continue;
            };
            lockstep::seed(&mut request, &mut wire);
            round.arrivals.push((id, *wire));
            jobs_now.push((id, request, cancel, gauged(sink, gauges)));
        }
        lockstep::exchange(group, &round);
        for (id, request, client, sink) in jobs_now {
            batch.submit(agreed.job(id, request, Some(client), sink));
        }
        agreed.cancel(&round.cancelled);
        gauges.step(&mut batch);
        if !open && batch.is_idle() {
            return;
        }
    }
}

/// A rank other than 0 of `options.group`: loads its share of the model, then steps its batch
/// as each of rank 0's rounds says, until rank 0 closes. Its events go nowhere.
pub fn follow(model: PathBuf, options: EngineOptions) -> anyhow::Result<()> {
    let member = options
        .group
        .clone()
        .ok_or_else(|| anyhow::anyhow!("a rank that follows rank 0 needs its group"))?;
    let group = member.group.clone();
    let loaded = LoadedModel::load_with(
        &model,
        options.gguf,
        options.projector.as_deref(),
        Some(member),
    );
    let everywhere = loaded_everywhere(&group, loaded.is_ok());
    let loaded = match loaded {
        Ok(loaded) => loaded,
        Err(error) => {
            // Rank 0 reports the failed start; ending now could end it before it does, so this
            // rank waits for its supervisor to end the group.
            tracing::error!(rank = group.rank(), model = %model.display(), %error, "cannot load this rank's share");
            loop {
                std::thread::park();
            }
        }
    };
    everywhere.map_err(anyhow::Error::msg)?;
    let limits = batch_limits(&loaded, &options);
    let draft = match load_draft(&loaded, &options, limits.speculation.method) {
        Ok(draft) => draft,
        Err(error) => {
            // As a failed load: rank 0 reports it, and this rank waits to be ended.
            tracing::error!(rank = group.rank(), %error, "cannot load the draft model");
            loop {
                std::thread::park();
            }
        }
    };
    let mut prefix = open_prefix_cache(&loaded, &options, Arc::default());
    let mut batch = Batch::new(&loaded, limits, options.memory_limit, prefix.as_mut());
    if let Some(draft) = &draft {
        batch = batch.with_draft(draft);
    }
    let mut agreed = lockstep::Agreed::default();
    loop {
        let round = lockstep::exchange(&group, &lockstep::Round::default());
        for (id, wire) in round.arrivals {
            let request = to_generate_request(Box::new(wire));
            batch.submit(agreed.job(id, request, None, Box::new(|_| {})));
        }
        agreed.cancel(&round.cancelled);
        batch.step();
        if round.closing && batch.is_idle() {
            break;
        }
    }
    drop(batch);
    if let Some(prefix) = &prefix
        && !prefix.flush(SHUTDOWN_FLUSH)
    {
        tracing::warn!(
            rank = group.rank(),
            "prefix cache: the SSD writer did not finish within the bound"
        );
    }
    Ok(())
}

fn job(submitted: Submitted, gauges: &Arc<Gauges>) -> Job<'static> {
    let Submitted {
        request,
        cancel,
        sink,
        ..
    } = submitted;
    Job {
        request,
        cancelled: Box::new(move || cancel.load(Ordering::Relaxed)),
        sink: gauged(sink, gauges),
    }
}

/// `sink`, which first moves the request between the occupancy gauges as its events say.
fn gauged(mut sink: EventSink, gauges: &Arc<Gauges>) -> EventSink {
    // The occupancy a request's own frames imply is published before each frame leaves, so
    // stats asked for right after a `Rejected` or `Done` already count it out (the batch's
    // own figures follow after its step).
    let gauges = gauges.clone();
    let mut started = false;
    Box::new(move |event| {
        match &event {
            Ok(Event::Accepted { .. }) if !started => {
                started = true;
                gauges.move_occupancy(-1, 1);
            }
            Ok(Event::Done { .. }) | Err(_) => {
                gauges.move_occupancy(if started { 0 } else { -1 }, if started { -1 } else { 0 });
            }
            _ => {}
        }
        sink(event);
    })
}
