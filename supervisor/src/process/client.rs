//! `WorkerClient`: the supervisor's end of one worker connection, shared by every request on
//! that worker.
//!
//! The connection is multiplexed: one writer task drains a channel of `ToWorker` frames (the
//! frame writer is not cancel-safe, so it must have exactly one owner), and one reader task
//! routes each `FromWorker` frame by request id to that request's channel. When the connection
//! ends (EOF, a bad frame, the process exited) every pending request gets a final
//! `FromWorker::Error` naming the model, pid and, when known, the exit status, so no request
//! waits on a dead worker.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use corral_ipc::{
    EmbedRequest, FrameReader, FrameWriter, FromWorker, GenerateRequest, RerankRequest,
    SupervisorConnection, ToWorker, WorkerStats,
};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot, watch};

use super::reaper::WorkerProcess;

/// How long `stats` waits for the worker's answer.
pub const STATS_TIMEOUT: Duration = Duration::from_secs(5);

/// After EOF, how long to wait for the reaper's exit status so the requests' error can name it.
const EXIT_STATUS_WAIT: Duration = Duration::from_millis(500);

/// After the process exited, how long to keep reading frames it wrote before it died.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the connection to the worker for {model} (pid {pid}) is closed: {reason}")]
    Closed {
        model: String,
        pid: u32,
        reason: String,
    },
    #[error("the worker for {model} (pid {pid}) did not answer GetStats within {} s", .after.as_secs())]
    StatsTimeout {
        model: String,
        pid: u32,
        after: Duration,
    },
}

/// One request's stream of frames: `Accepted` or `Rejected`, then `Delta`s, then `Done` or
/// `Error` (for `Embed` and `Rerank`: one `Embeddings`, `Scores`, `Rejected` or `Error`). The
/// channel always ends with one of `Rejected`, `Done`, `Embeddings`, `Scores` or `Error`.
#[derive(Debug)]
pub struct RequestHandle {
    pub id: u64,
    pub events: mpsc::UnboundedReceiver<FromWorker>,
}

/// What the reader, the writer and the client share.
#[derive(Debug, Default)]
struct Routes {
    pending: HashMap<u64, mpsc::UnboundedSender<FromWorker>>,
    /// `GetStats` answers arrive in the order they were asked for.
    stats: VecDeque<oneshot::Sender<WorkerStats>>,
    /// Why the connection closed; once set, nothing new is registered.
    closed: Option<String>,
}

#[derive(Debug)]
struct Shared {
    model: String,
    pid: u32,
    routes: Mutex<Routes>,
    /// Set when the connection is closed, so the writer task stops and drops its half.
    closing: watch::Sender<bool>,
}

#[derive(Debug)]
pub struct WorkerClient {
    shared: Arc<Shared>,
    outbox: mpsc::UnboundedSender<ToWorker>,
    next_id: AtomicU64,
    process: WorkerProcess,
    /// A worker group's ranks, rank 0 (this connection's process) first; empty for a worker
    /// of its own.
    ranks: Vec<Rank>,
    /// The positions a sequence may hold, as the worker said when it was ready.
    context_length: Option<u32>,
}

/// One rank of a worker group, where it runs.
#[derive(Debug, Clone)]
pub struct Rank {
    pub rank: usize,
    pub host: String,
    /// The process's id on its host.
    pub pid: u32,
    /// A rank on another host: the footprint its member last reported (0 before the first).
    pub reported_footprint: Option<Arc<AtomicU64>>,
    /// Ranks other than 0: their end, once known (rank 0's is the worker's).
    pub ended: Option<RankEnded>,
}

/// A rank's end as its tie learns it: reaped here, or confirmed by its member.
pub type RankEnded = watch::Receiver<Option<RankEnd>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnd {
    /// Its exit status, or how it was lost.
    pub status: String,
    /// Whether it is known reaped: here, or as its member said. A member that cannot be
    /// reached ends its rank when the connection closes, unconfirmed.
    pub confirmed: bool,
}

impl RankEnd {
    pub fn confirmed(status: impl Into<String>) -> Option<Self> {
        Some(Self {
            status: status.into(),
            confirmed: true,
        })
    }

    pub fn unconfirmed(status: impl Into<String>) -> Option<Self> {
        Some(Self {
            status: status.into(),
            confirmed: false,
        })
    }
}

impl Rank {
    /// Its end, once its tie tells it before `deadline`; `None` for rank 0, or when untold.
    pub async fn end_by(&self, deadline: tokio::time::Instant) -> Option<RankEnd> {
        let mut ended = self.ended.clone()?;
        let told = tokio::time::timeout_at(deadline, ended.wait_for(|end| end.is_some())).await;
        told.ok()?.ok()?.clone()
    }

    /// The rank's footprint: read here for a rank on this host, as its member last told it for
    /// one elsewhere.
    pub fn footprint_bytes(&self) -> Option<u64> {
        match &self.reported_footprint {
            Some(reported) => Some(reported.load(Ordering::Relaxed)).filter(|bytes| *bytes > 0),
            None => crate::memory::process_footprint(self.pid).ok(),
        }
    }
}

impl WorkerClient {
    /// Takes over a connection that has passed the handshake and whose `Ready` has been read,
    /// and starts its reader and writer tasks.
    pub fn new(model: &str, connection: SupervisorConnection, process: WorkerProcess) -> Self {
        let (closing, closing_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            model: model.to_owned(),
            pid: process.pid(),
            routes: Mutex::new(Routes::default()),
            closing,
        });
        let (reader, writer) = connection.into_split();
        let (outbox, outgoing) = mpsc::unbounded_channel();
        tokio::spawn(write_frames(
            Arc::clone(&shared),
            writer,
            outgoing,
            closing_rx,
            process.clone(),
        ));
        tokio::spawn(read_frames(Arc::clone(&shared), reader, process.clone()));
        Self {
            shared,
            outbox,
            next_id: AtomicU64::new(1),
            process,
            ranks: Vec::new(),
            context_length: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.shared.pid
    }

    pub fn model(&self) -> &str {
        &self.shared.model
    }

    /// The process behind the connection, for stopping and killing it.
    pub fn process(&self) -> &WorkerProcess {
        &self.process
    }

    /// The worker as rank 0 of a group of `ranks`.
    pub fn with_ranks(self, ranks: Vec<Rank>) -> Self {
        Self { ranks, ..self }
    }

    pub fn ranks(&self) -> &[Rank] {
        &self.ranks
    }

    pub fn with_context_length(self, context_length: u32) -> Self {
        Self {
            context_length: Some(context_length),
            ..self
        }
    }

    pub fn context_length(&self) -> Option<u32> {
        self.context_length
    }

    /// Sends `request` under a new id and returns the channel its frames will arrive on.
    pub async fn generate(&self, request: GenerateRequest) -> Result<RequestHandle, ClientError> {
        self.send_request(|id| ToWorker::Generate {
            id,
            request: Box::new(request),
        })
    }

    /// Sends an `Embed` request; its channel gets one `Embeddings`, `Rejected` or `Error`.
    pub async fn embed(&self, request: EmbedRequest) -> Result<RequestHandle, ClientError> {
        self.send_request(|id| ToWorker::Embed { id, request })
    }

    /// Sends a `Rerank` request; its channel gets one `Scores`, `Rejected` or `Error`.
    pub async fn rerank(&self, request: RerankRequest) -> Result<RequestHandle, ClientError> {
        self.send_request(|id| ToWorker::Rerank { id, request })
    }

    /// Registers a new id's channel, then sends the frame `frame(id)`.
    fn send_request(
        &self,
        frame: impl FnOnce(u64) -> ToWorker,
    ) -> Result<RequestHandle, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, events) = mpsc::unbounded_channel();
        {
            let mut routes = self.shared.routes();
            if let Some(reason) = &routes.closed {
                return Err(self.shared.closed_error(reason));
            }
            routes.pending.insert(id, sender);
        }
        if self.outbox.send(frame(id)).is_err() {
            self.shared.routes().pending.remove(&id);
            return Err(self.shared.closed_error("the writer task has ended"));
        }
        Ok(RequestHandle { id, events })
    }

    /// Asks the worker to stop request `id`; it still ends the request with `Done`. Best
    /// effort: on a closed connection the request has been failed already.
    pub fn cancel(&self, id: u64) {
        let _ = self.outbox.send(ToWorker::Cancel { id });
    }

    pub async fn stats(&self) -> Result<WorkerStats, ClientError> {
        let (sender, answer) = oneshot::channel();
        {
            let mut routes = self.shared.routes();
            if let Some(reason) = &routes.closed {
                return Err(self.shared.closed_error(reason));
            }
            routes.stats.push_back(sender);
        }
        if self.outbox.send(ToWorker::GetStats).is_err() {
            return Err(self.shared.closed_error("the writer task has ended"));
        }
        match tokio::time::timeout(STATS_TIMEOUT, answer).await {
            Ok(Ok(stats)) => Ok(stats),
            Ok(Err(_)) => Err(self.shared.closed_error("closed while waiting for stats")),
            Err(_) => Err(ClientError::StatsTimeout {
                model: self.shared.model.clone(),
                pid: self.shared.pid,
                after: STATS_TIMEOUT,
            }),
        }
    }

    /// Asks the worker to finish and exit; see `stop::stop` for the whole stop.
    pub fn shutdown(&self) {
        let _ = self.outbox.send(ToWorker::Shutdown);
    }

    /// Ends every pending request with `FromWorker::Error { message }` and closes the
    /// connection; later calls fail with `ClientError::Closed`.
    pub fn fail_all(&self, message: &str) {
        self.shared.fail_all(message);
    }
}

impl Shared {
    fn routes(&self) -> MutexGuard<'_, Routes> {
        // The map stays consistent under every panic point (single inserts and removes).
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn closed_error(&self, reason: &str) -> ClientError {
        ClientError::Closed {
            model: self.model.clone(),
            pid: self.pid,
            reason: reason.to_owned(),
        }
    }

    fn fail_all(&self, message: &str) {
        let (pending, stats) = {
            let mut routes = self.routes();
            if routes.closed.is_some() {
                return;
            }
            routes.closed = Some(message.to_owned());
            (
                std::mem::take(&mut routes.pending),
                std::mem::take(&mut routes.stats),
            )
        };
        drop(stats);
        if !pending.is_empty() {
            tracing::warn!(
                model = %self.model,
                pid = self.pid,
                requests = pending.len(),
                "failing in-flight requests: {message}"
            );
        }
        for (id, sender) in pending {
            let _ = sender.send(FromWorker::Error {
                id,
                message: message.to_owned(),
            });
        }
        self.closing.send_replace(true);
    }

    /// Routes one frame; the request's entry goes with its last frame.
    fn dispatch(&self, frame: FromWorker) {
        let (id, last) = match &frame {
            FromWorker::Accepted { id, .. } | FromWorker::Delta { id, .. } => (*id, false),
            FromWorker::Rejected { id, .. }
            | FromWorker::Embeddings { id, .. }
            | FromWorker::Scores { id, .. }
            | FromWorker::Done { id, .. }
            | FromWorker::Error { id, .. } => (*id, true),
            FromWorker::Stats(stats) => {
                if let Some(waiter) = self.routes().stats.pop_front() {
                    // The asker may have timed out; its answer is simply dropped.
                    let _ = waiter.send(*stats);
                }
                return;
            }
            FromWorker::Hello { .. } | FromWorker::Ready { .. } | FromWorker::LoadFailed { .. } => {
                tracing::warn!(model = %self.model, pid = self.pid, frame = frame.name(), "unexpected frame after start");
                return;
            }
        };
        let mut routes = self.routes();
        let sender = if last {
            routes.pending.remove(&id)
        } else {
            routes.pending.get(&id).cloned()
        };
        drop(routes);
        match sender {
            // A dropped receiver means the caller stopped listening; the worker finishes anyway.
            Some(sender) => drop(sender.send(frame)),
            None => {
                tracing::debug!(model = %self.model, pid = self.pid, id, frame = frame.name(), "frame for an unknown request")
            }
        }
    }
}

async fn write_frames(
    shared: Arc<Shared>,
    mut writer: FrameWriter<OwnedWriteHalf, ToWorker>,
    mut outgoing: mpsc::UnboundedReceiver<ToWorker>,
    mut closing: watch::Receiver<bool>,
    process: WorkerProcess,
) {
    loop {
        let frame = tokio::select! {
            frame = outgoing.recv() => frame,
            _ = closing.wait_for(|closed| *closed) => None,
        };
        // Every client handle is gone, or the connection was closed: dropping the writer shuts
        // the write direction, which the worker reads as its cue to exit.
        let Some(frame) = frame else { return };
        if let Err(error) = writer.write_frame(&frame).await {
            // A write fails first when the worker was killed: the requests' error names the
            // death, as the reader's would, so a caller can tell it and retry.
            let failed = format!(
                "cannot write to the worker for {} (pid {}): {error}",
                shared.model, shared.pid
            );
            shared.fail_all(&ended_message(&shared, &process, &failed).await);
            return;
        }
    }
}

async fn read_frames(
    shared: Arc<Shared>,
    mut reader: FrameReader<OwnedReadHalf, FromWorker>,
    process: WorkerProcess,
) {
    let ended = loop {
        let frame = tokio::select! {
            frame = reader.read_frame() => frame,
            _ = process.wait() => break drain(&shared, &mut reader).await,
        };
        match frame {
            Ok(Some(frame)) => shared.dispatch(frame),
            Ok(None) => break "the worker closed the connection".to_owned(),
            Err(error) => {
                tracing::error!(model = %shared.model, pid = shared.pid, %error, "bad frame from the worker; closing the connection");
                break format!("bad frame: {error}");
            }
        }
    };
    let message = ended_message(
        &shared,
        &process,
        &format!(
            "the connection to the worker for {} (pid {}) ended: {ended}",
            shared.model, shared.pid
        ),
    )
    .await;
    shared.fail_all(&message);
}

/// Why the connection ended for its requests: the process's exit status once it is known
/// (waiting briefly for the reaper), else `otherwise`.
async fn ended_message(shared: &Shared, process: &WorkerProcess, otherwise: &str) -> String {
    let status = match process.exited() {
        Some(status) => Some(status),
        None => tokio::time::timeout(EXIT_STATUS_WAIT, process.wait())
            .await
            .ok(),
    };
    match status {
        Some(status) => format!(
            "the worker for {} (pid {}) ended with {status}",
            shared.model, shared.pid
        ),
        None => otherwise.to_owned(),
    }
}

/// Routes the frames a dead worker managed to write before it died, so a request that finished
/// just before the exit still ends with its `Done`.
async fn drain(shared: &Shared, reader: &mut FrameReader<OwnedReadHalf, FromWorker>) -> String {
    let read_rest = async {
        while let Ok(Some(frame)) = reader.read_frame().await {
            shared.dispatch(frame);
        }
    };
    let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, read_rest).await;
    "the worker exited".to_owned()
}
