//! `Spawner`: starting real `corral-worker serve` processes for the pool.
//!
//! One launch: bind the model's socket in the run directory, spawn the worker with a one-time
//! token in its environment (never in argv, where `ps` shows it), hand the child to its reaper
//! at once (so an exit at any moment reaches the pool), forward its output to our log, then,
//! under one start timeout, accept its connection, check the handshake and read `Ready` or
//! `LoadFailed`. A failed launch kills and reaps its process before returning, as the
//! `Processes` contract asks. A `LoadFailed` the worker calls permanent (the files can never
//! load) is reported to the registry before the launch returns, so the model is listed as
//! unservable by the time anyone hears of the failure.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use corral_ipc::{FromWorker, HANDSHAKE_TIMEOUT, SupervisorConnection, supervisor_accept};
use nix::sys::signal::Signal;
use tokio::net::UnixListener;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::client::{Rank, WorkerClient};
use super::group::{self, Group, GroupPlan, HostFile};
use super::output::{self, LastError};
use super::reaper::{WorkerExit, WorkerProcess};
use super::remote::{self, LostRank, RemoteRank};
use super::run_dir::{RunDir, SlotName};
use crate::cluster::{Cluster, Collectives, ModelDigest, RankSettings, RankStart};
use crate::pool::{LaunchError, LaunchedWorker};

/// How long a worker may take from spawn to `Ready`; loading a large model from a cold disk
/// takes a while.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(120);

/// Model id → the model directory or file its worker loads, from the registry; or why the
/// registry serves no such model (unservable, or gone since it was asked for).
pub type ModelLookup = Arc<dyn Fn(&str) -> Result<PathBuf, String> + Send + Sync>;

/// Told `(model, path, reason)` when a worker found that the model's files at `path` can never
/// load; `reason` names the file.
pub type UnloadableReport = Arc<dyn Fn(&str, &Path, &str) + Send + Sync>;

/// Model id → the options its worker gets besides everyone's (its batch size): settings, never
/// a path, so that a coordinator can send its own to the ranks other hosts run.
pub type ModelArgs = Arc<dyn Fn(&str) -> Vec<String> + Send + Sync>;

/// `(model id, its draft model's id)` → the options naming files this host holds for the model
/// (its projector, its draft model), found by this host's registry.
pub type ModelFiles = Arc<dyn Fn(&str, Option<&str>) -> Vec<OsString> + Send + Sync>;

/// Model id → how many ranks on this host serve it together (1: a worker of its own), and how.
pub type ModelRanks = Arc<dyn Fn(&str) -> GroupPlan + Send + Sync>;

/// A rank started for a coordinator on another host.
pub struct MemberRank {
    /// Its heartbeats come on its stdout.
    pub child: Child,
    /// What it joins by; removed when dropped.
    pub hostfile: HostFile,
    /// The error it ends with, if any.
    pub last_error: LastError,
}

#[derive(Clone)]
pub struct Spawner {
    binary: PathBuf,
    run_dir: RunDir,
    lookup: ModelLookup,
    start_timeout: Duration,
    /// How long a group's rank may stay silent before the group is ended as hung.
    heartbeat_timeout: Duration,
    exits: mpsc::UnboundedSender<WorkerExit>,
    /// Passed to every worker after its own arguments (prefix cache settings).
    worker_args: Vec<OsString>,
    /// Passed to one model's worker after `worker_args`.
    model_args: Option<ModelArgs>,
    model_files: Option<ModelFiles>,
    /// Model id → the id of the draft model its worker loads beside it.
    drafts: Arc<HashMap<String, String>>,
    ranks: Option<ModelRanks>,
    unloadable: Option<UnloadableReport>,
    /// The hosts a group's ranks may run on besides this one, and this host's key.
    cluster: Option<Arc<Cluster>>,
}

impl Spawner {
    /// Every worker exit is sent to `exits`; drain it into the pool with `Pool::on_exit`
    /// (the pool is built over this spawner, so it cannot be handed in here).
    pub fn new(
        binary: PathBuf,
        run_dir: RunDir,
        lookup: ModelLookup,
        exits: mpsc::UnboundedSender<WorkerExit>,
    ) -> Self {
        Self {
            binary,
            run_dir,
            lookup,
            start_timeout: DEFAULT_START_TIMEOUT,
            heartbeat_timeout: group::DEFAULT_HEARTBEAT_TIMEOUT,
            exits,
            worker_args: Vec::new(),
            model_args: None,
            model_files: None,
            drafts: Arc::default(),
            ranks: None,
            cluster: None,
            unloadable: None,
        }
    }

    pub fn with_worker_args(mut self, worker_args: Vec<OsString>) -> Self {
        self.worker_args = worker_args;
        self
    }

    pub fn with_model_args(mut self, model_args: ModelArgs) -> Self {
        self.model_args = Some(model_args);
        self
    }

    pub fn with_model_files(mut self, model_files: ModelFiles) -> Self {
        self.model_files = Some(model_files);
        self
    }

    /// Each model's draft model, by id (model id → draft id).
    pub fn with_drafts(mut self, drafts: HashMap<String, String>) -> Self {
        self.drafts = Arc::new(drafts);
        self
    }

    /// Models served by a group of ranks on this host.
    pub fn with_ranks(mut self, ranks: ModelRanks) -> Self {
        self.ranks = Some(ranks);
        self
    }

    /// Groups whose ranks run on the hosts of `cluster` too.
    pub fn with_cluster(mut self, cluster: Arc<Cluster>) -> Self {
        self.cluster = Some(cluster);
        self
    }

    pub fn with_heartbeat_timeout(mut self, heartbeat_timeout: Duration) -> Self {
        self.heartbeat_timeout = heartbeat_timeout;
        self
    }

    pub fn with_start_timeout(mut self, start_timeout: Duration) -> Self {
        self.start_timeout = start_timeout;
        self
    }

    /// Where a model whose files can never load is reported (the registry lists it unservable).
    pub fn with_unloadable_report(mut self, unloadable: UnloadableReport) -> Self {
        self.unloadable = Some(unloadable);
        self
    }

    /// Spawns `model`'s worker with `memory_limit` bytes as its share of the budget and waits
    /// until it is ready; a failed launch has killed and reaped its process.
    pub async fn launch(
        &self,
        model: &str,
        memory_limit: u64,
    ) -> Result<LaunchedWorker<Arc<WorkerClient>>, LaunchError> {
        let spawn_error = |error| LaunchError::Spawn {
            model: model.to_owned(),
            error,
        };
        // A model listed unservable after this request passed its check starts no process.
        let dir = (self.lookup)(model).map_err(|reason| LaunchError::Unservable {
            model: model.to_owned(),
            reason,
        })?;
        let token = one_time_token().map_err(spawn_error)?;
        let slot = SlotName::for_model(model);
        let (listener, socket) = self
            .run_dir
            .bind(&slot)
            .map_err(|err| spawn_error(std::io::Error::other(err)))?;
        let plan = self.plan(model);
        let ranks = plan.ranks();
        let group = match ranks {
            1 => None,
            _ => match Group::prepare(&self.run_dir, &slot, plan, self.cluster.as_deref()) {
                Ok(group) => Some(group),
                Err(error) => {
                    remove_socket(&socket, model);
                    return Err(spawn_error(error));
                }
            },
        };
        // Each rank holds its share of the model, and of the budget.
        let memory_limit = memory_limit / ranks as u64;
        // Ranks on other hosts start first, so that a host that cannot run its rank refuses
        // before any process starts here; dropping them ends them there.
        let remote_ranks = match &group {
            Some(group) => match self
                .start_remote_ranks(group, model, &dir, memory_limit)
                .await
            {
                Ok(remote_ranks) => remote_ranks,
                Err(reason) => {
                    remove_socket(&socket, model);
                    return Err(LaunchError::Cluster {
                        model: model.to_owned(),
                        reason,
                    });
                }
            },
            None => Vec::new(),
        };
        let mut command = self.command(model, &dir, &socket, memory_limit);
        if let Some(group) = &group {
            group.join_as(&mut command, 0);
        }
        let spawned = command
            .env(corral_ipc::WORKER_TOKEN_ENV, &token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A safety net for a supervisor that unwinds without stopping its workers.
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => {
                remove_socket(&socket, model);
                return Err(spawn_error(error));
            }
        };
        let pid = child.id().unwrap_or(0);
        tracing::info!(model, pid, dir = %dir.display(), "worker spawned");
        let stdout = child.stdout.take();
        let last_error = output::forward(child.stderr.take(), model, pid);
        if let Err(error) = self.run_dir.write_record(pid, &self.binary, model) {
            tracing::warn!(model, pid, %error, "cannot record the worker's pid");
        }
        let process = WorkerProcess::watch(child, model, self.exits.clone());
        self.forget_record_on_exit(&process);
        // A group's ranks beat on their stdout; a single worker's is its log.
        let mut ranks = Vec::new();
        let lost = LostRank::default();
        if let Some(group) = &group {
            let silenced = group::silence(stdout, pid, model, self.heartbeat_timeout);
            group::end_when_silent(&process, silenced);
            match self.spawn_followers(group, model, &dir, &socket, memory_limit, &process) {
                Ok(followers) => ranks = followers,
                Err(error) => {
                    remove_socket(&socket, model);
                    process.signal(Signal::SIGKILL);
                    process.wait().await;
                    return Err(spawn_error(error));
                }
            }
            ranks.extend(
                remote_ranks.into_iter().map(|remote| {
                    remote.tie(process.clone(), self.heartbeat_timeout, model, &lost)
                }),
            );
            ranks.sort_by_key(|rank| rank.rank);
        } else {
            output::forward(stdout, model, pid);
        }

        let ready = tokio::time::timeout(
            self.start_timeout,
            connect(listener, &socket, &token, model, &dir, &process),
        )
        .await
        .unwrap_or_else(|_| {
            Err(LaunchError::LoadFailed {
                model: model.to_owned(),
                pid,
                message: format!(
                    "did not become ready within {} s",
                    self.start_timeout.as_secs_f64()
                ),
            })
        });
        remove_socket(&socket, model);
        match ready {
            Ok((connection, context_length)) => Ok(LaunchedWorker {
                pid,
                handle: Arc::new(
                    WorkerClient::new(model, connection, process)
                        .with_ranks(ranks)
                        .with_context_length(context_length),
                ),
            }),
            Err(error) => {
                process.signal(Signal::SIGKILL);
                process.wait().await;
                // Rank 0 ended because a rank on another host was lost: that host is the news.
                let lost = lost.lock().unwrap_or_else(PoisonError::into_inner).take();
                let error = match (lost, error) {
                    (Some(reason), _) => LaunchError::Cluster {
                        model: model.to_owned(),
                        reason,
                    },
                    (
                        None,
                        LaunchError::Exited {
                            model, pid, status, ..
                        },
                    ) => LaunchError::Exited {
                        model,
                        pid,
                        status,
                        said: last_error.get().await,
                    },
                    (None, error) => error,
                };
                if let (LaunchError::Unservable { reason, .. }, Some(report)) =
                    (&error, &self.unloadable)
                {
                    report(model, &dir, reason);
                }
                Err(error)
            }
        }
    }

    /// `corral-worker serve` for `model`, before its environment and pipes are set.
    pub(super) fn command(
        &self,
        model: &str,
        dir: &Path,
        socket: &Path,
        memory_limit: u64,
    ) -> Command {
        let settings = RankSettings {
            flags: self.flags(model),
            draft: self.drafts.get(model).cloned(),
        };
        self.command_with(model, (dir, socket), memory_limit, &settings)
    }

    /// This host's options for `model`'s worker that name no file.
    pub fn flags(&self, model: &str) -> Vec<String> {
        self.model_args
            .as_ref()
            .map_or_else(Vec::new, |model_args| model_args(model))
    }

    /// `corral-worker serve` for `model` at `dir` with `settings`, before its environment and
    /// pipes are set; the files they name are this host's.
    fn command_with(
        &self,
        model: &str,
        (dir, socket): (&Path, &Path),
        memory_limit: u64,
        settings: &RankSettings,
    ) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .arg("serve")
            .arg("--model")
            .arg(dir)
            .arg("--socket")
            .arg(socket);
        command.arg("--memory-limit").arg(memory_limit.to_string());
        command.args(&self.worker_args);
        command.args(&settings.flags);
        if let Some(model_files) = &self.model_files {
            command.args(model_files(model, settings.draft.as_deref()));
        }
        command
    }

    /// Ranks 1 and up of `group`, each tied to rank 0 (`leader`); every rank of the group,
    /// rank 0 first.
    fn spawn_followers(
        &self,
        group: &Group,
        model: &str,
        dir: &Path,
        socket: &Path,
        memory_limit: u64,
        leader: &WorkerProcess,
    ) -> std::io::Result<Vec<Rank>> {
        let mut ranks = vec![group.rank(0, leader.pid(), None)];
        for rank in group.local_followers() {
            let mut command = self.command(model, dir, socket, memory_limit);
            group.join_as(&mut command, rank);
            let mut child = spawn_rank(&mut command)?;
            let pid = child.id().unwrap_or(0);
            tracing::info!(
                model,
                rank,
                pid,
                leader = leader.pid(),
                "worker group rank spawned"
            );
            let silenced = group::silence(child.stdout.take(), pid, model, self.heartbeat_timeout);
            output::forward(child.stderr.take(), model, pid);
            if let Err(error) = self.run_dir.write_record(pid, &self.binary, model) {
                tracing::warn!(model, pid, %error, "cannot record the rank's pid");
            }
            let (leader, run_dir) = (leader.clone(), self.run_dir.clone());
            let ended = group::tie(child, leader, silenced, (model.to_owned(), rank), run_dir);
            ranks.push(group.rank(rank, pid, Some(ended)));
        }
        Ok(ranks)
    }

    /// Starts, through each host's member, the ranks of `group` that run on other hosts; the
    /// reason, naming the host, if one cannot.
    async fn start_remote_ranks(
        &self,
        group: &Group,
        model: &str,
        dir: &Path,
        memory_limit: u64,
    ) -> Result<Vec<RemoteRank>, String> {
        let remote_ranks: Vec<(usize, &str)> = group.remote_ranks().collect();
        if remote_ranks.is_empty() {
            return Ok(Vec::new());
        }
        let Some(cluster) = &self.cluster else {
            return Err("the group spans hosts, and this corral has no [cluster] key".to_owned());
        };
        let digest_dir = dir.to_path_buf();
        let files = tokio::task::spawn_blocking(move || ModelDigest::of(&digest_dir))
            .await
            .map_err(|error| error.to_string())?
            .map_err(|error| format!("{error:#}"))?;
        let mut started = Vec::new();
        for (rank, host) in remote_ranks {
            let start = RankStart {
                model: model.to_owned(),
                rank,
                parallel: group.parallel().to_owned(),
                collectives: group.collectives().clone(),
                memory_limit,
                files: files.clone(),
                settings: RankSettings {
                    flags: self.flags(model),
                    draft: self.drafts.get(model).cloned(),
                },
            };
            let starting = remote::start(cluster, host, start);
            let remote_rank = tokio::time::timeout(self.start_timeout, starting)
                .await
                .map_err(|_| {
                    format!(
                        "host {host:?}, rank {rank}: no answer within {} s",
                        self.start_timeout.as_secs_f64()
                    )
                })??;
            started.push(remote_rank);
        }
        Ok(started)
    }

    /// How many ranks serve `model`, on which hosts, and how they split it.
    pub fn plan(&self, model: &str) -> GroupPlan {
        self.ranks
            .as_ref()
            .map_or(GroupPlan::ALONE, |ranks| ranks(model))
    }

    /// The model `model` as this host's registry serves it, or why it serves none.
    pub fn find(&self, model: &str) -> Result<PathBuf, String> {
        (self.lookup)(model)
    }

    /// Rank `rank` of `model`'s group for a coordinator on another host, splitting the model
    /// `parallel`-wise, joining by `collectives`: the model at `dir`, with this host's arguments
    /// for it. Its heartbeats come on the child's stdout.
    pub fn spawn_member_rank(
        &self,
        model: &str,
        dir: &Path,
        (rank, parallel, collectives): (usize, &str, &Collectives),
        memory_limit: u64,
        settings: &RankSettings,
    ) -> std::io::Result<MemberRank> {
        static STARTS: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "{}.member{}",
            SlotName::for_model(model).as_str(),
            STARTS.fetch_add(1, Ordering::Relaxed)
        );
        let hostfile = HostFile::write(
            self.run_dir.path().join(format!("{name}.hosts.json")),
            collectives.clone(),
        )?;
        // A rank other than 0 never connects to a supervisor; the path only fills the argument.
        let socket = self.run_dir.path().join(format!("{name}.sock"));
        let mut command = self.command_with(model, (dir, &socket), memory_limit, settings);
        hostfile.join_as(&mut command, rank, parallel);
        let mut child = spawn_rank(&mut command)?;
        let pid = child.id().unwrap_or(0);
        let last_error = output::forward(child.stderr.take(), model, pid);
        if let Err(error) = self.run_dir.write_record(pid, &self.binary, model) {
            tracing::warn!(model, pid, %error, "cannot record the rank's pid");
        }
        Ok(MemberRank {
            child,
            hostfile,
            last_error,
        })
    }

    /// Forgets the pid record of a reaped rank started by `spawn_member_rank`.
    pub fn forget_record(&self, pid: u32) {
        if let Err(error) = self.run_dir.remove_record(pid) {
            tracing::warn!(pid, %error, "cannot remove the rank's pid record");
        }
    }

    fn forget_record_on_exit(&self, process: &WorkerProcess) {
        let run_dir = self.run_dir.clone();
        let process = process.clone();
        tokio::spawn(async move {
            process.wait().await;
            if let Err(error) = run_dir.remove_record(process.pid()) {
                tracing::warn!(pid = process.pid(), %error, "cannot remove the worker's pid record");
            }
        });
    }
}

/// Accepts connections until the worker's own passes the handshake, then reads its first frame.
/// Any other local process that connects (same user: the socket is 0600) is refused and logged,
/// and the wait goes on. An exit before the worker connects ends the wait at once.
async fn connect(
    listener: UnixListener,
    socket: &Path,
    token: &str,
    model: &str,
    dir: &Path,
    process: &WorkerProcess,
) -> Result<(SupervisorConnection, u32), LaunchError> {
    let pid = process.pid();
    let mut connection = loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            status = process.wait() => {
                return Err(LaunchError::Exited { model: model.to_owned(), pid, status, said: None });
            }
        };
        let (stream, _) = accepted.map_err(|err| LaunchError::Handshake {
            model: model.to_owned(),
            pid,
            reason: format!("accept on {}: {err}", socket.display()),
        })?;
        match supervisor_accept(stream, token, Some(pid), HANDSHAKE_TIMEOUT).await {
            Ok(connection) => break connection,
            Err(error) => tracing::warn!(
                model,
                pid,
                socket = %socket.display(),
                %error,
                "refused a connection on the worker socket"
            ),
        }
    };
    // The worker is in: nobody else may connect from here on.
    drop(listener);
    remove_socket(socket, model);
    match connection.recv().await {
        Ok(Some(FromWorker::Ready {
            load_time_ms,
            weight_bytes,
            context_length,
            model_dir,
        })) => {
            tracing::info!(
                model,
                pid,
                load_time_ms,
                weight_bytes,
                context_length,
                model_dir,
                "worker ready"
            );
            Ok((connection, context_length))
        }
        Ok(Some(FromWorker::LoadFailed {
            message,
            permanent: true,
        })) => {
            let reason = naming(dir, message);
            tracing::warn!(model, pid, path = %dir.display(), reason, "the model's files cannot load");
            Err(LaunchError::Unservable {
                model: model.to_owned(),
                reason,
            })
        }
        Ok(Some(FromWorker::LoadFailed { message, .. })) => Err(LaunchError::LoadFailed {
            model: model.to_owned(),
            pid,
            message,
        }),
        Ok(Some(other)) => Err(LaunchError::Handshake {
            model: model.to_owned(),
            pid,
            reason: format!("expected Ready, got {}", other.name()),
        }),
        // The worker is dying: its exit status says more than the closed socket.
        Ok(None) | Err(_) => Err(LaunchError::Exited {
            model: model.to_owned(),
            pid,
            status: process.wait().await,
            said: None,
        }),
    }
}

/// The worker's `message`, led by the model's path unless it already starts with it (the
/// worker's errors name the file they are about), so the reason always names a path.
pub(super) fn naming(path: &Path, message: String) -> String {
    if message.starts_with(&*path.to_string_lossy()) {
        message
    } else {
        format!("{}: {message}", path.display())
    }
}

/// 128 random bits as hex: the worker must present it, so another local process that finds
/// the socket cannot pose as the worker.
fn one_time_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// Once accepted (or abandoned), the socket has no further use; a stale one would only be
/// replaced by the next bind anyway.
fn remove_socket(socket: &Path, model: &str) {
    if let Err(error) = std::fs::remove_file(socket)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(model, socket = %socket.display(), %error, "cannot remove the worker socket");
    }
}

/// Logs each line the worker prints, tagged with its model and pid, under target `worker`.
/// A rank other than 0: its heartbeats on a pipe, its log forwarded, killed if dropped.
fn spawn_rank(command: &mut Command) -> std::io::Result<Child> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
}
