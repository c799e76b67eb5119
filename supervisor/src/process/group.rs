//! A worker group: one model served by several `corral-worker serve --parallel …` ranks, which
//! MLX's distributed backend joins: a ring over loopback when all run here, the `[cluster]`
//! backend over its addresses when some run on other hosts (started there by their member,
//! `super::remote`). Rank 0 is the
//! worker the pool knows (its socket, its leases, its exit); every other rank is tied to it, so
//! that when either ends the other is ended too and the group lives and dies as one worker.

use std::io;
use std::net::TcpListener;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::{oneshot, watch};

use super::client::{Rank, RankEnd, RankEnded};
use super::reaper::WorkerProcess;
use super::run_dir::{RunDir, SlotName};
use crate::cluster::{Cluster, ClusterConfig, Collectives};

/// How long a rank may stay silent by default; it beats every second.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(30);

/// How many ranks serve a model together, on which hosts, and how they split it (the worker's
/// `--parallel`: `pipeline` or `tensor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPlan {
    /// Each rank's host, rank 0 first; empty for a worker of its own.
    pub hosts: Vec<String>,
    pub parallel: &'static str,
}

impl GroupPlan {
    /// A worker of its own.
    pub const ALONE: Self = Self {
        hosts: Vec::new(),
        parallel: "pipeline",
    };

    pub fn ranks(&self) -> usize {
        self.hosts.len().max(1)
    }

    /// Whether a rank runs on another host.
    pub fn spans_hosts(&self) -> bool {
        self.hosts.iter().any(|host| !ClusterConfig::is_local(host))
    }
}

/// What one start of a group joins by, in a file only this user can read (the ring's host file,
/// or JACCL's devices); removed when dropped (the ranks read it as they join).
pub struct HostFile {
    path: PathBuf,
    /// The variable that names the file to the backend.
    variable: &'static str,
    collectives: Collectives,
}

impl HostFile {
    pub fn write(path: PathBuf, collectives: Collectives) -> io::Result<Self> {
        let (variable, body) = collectives.file().map_err(io::Error::other)?;
        write_private(&path, &body)?;
        Ok(Self {
            path,
            variable,
            collectives,
        })
    }

    pub fn collectives(&self) -> &Collectives {
        &self.collectives
    }

    /// Makes `command` rank `rank` of a group that splits its model `parallel`-wise.
    pub fn join_as(&self, command: &mut Command, rank: usize, parallel: &str) {
        command
            .args(["--parallel", parallel])
            .args(["--backend", self.collectives.backend()])
            .env(corral_ipc::GROUP_RANK_ENV, rank.to_string())
            .env(self.variable, &self.path);
        if let Some((variable, value)) = self.collectives.environment() {
            command.env(variable, value);
        }
    }
}

impl Drop for HostFile {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_file(&self.path)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), %error, "cannot remove the group's host file");
        }
    }
}

/// One start of a group: its plan and what its ranks join by.
pub struct Group {
    hostfile: HostFile,
    plan: GroupPlan,
}

impl Group {
    /// `plan`'s ranks of `slot`'s model: a ring on loopback ports the system hands out now when
    /// they all run here, else `cluster`'s backend over the addresses it gives each host.
    pub fn prepare(
        run_dir: &RunDir,
        slot: &SlotName,
        plan: GroupPlan,
        cluster: Option<&Cluster>,
    ) -> io::Result<Self> {
        let collectives = if plan.spans_hosts() {
            let cluster = cluster.ok_or_else(|| {
                io::Error::other("the group spans hosts, and this corral has no [cluster] key")
            })?;
            cluster
                .config()
                .collectives(&plan.hosts)
                .map_err(io::Error::other)?
        } else {
            Collectives::Ring(loopback_ring(plan.ranks())?)
        };
        let hostfile = HostFile::write(
            run_dir.path().join(format!("{}.hosts.json", slot.as_str())),
            collectives,
        )?;
        Ok(Self { hostfile, plan })
    }

    pub fn collectives(&self) -> &Collectives {
        self.hostfile.collectives()
    }

    pub fn parallel(&self) -> &'static str {
        self.plan.parallel
    }

    /// Ranks 1 and up that run on this host.
    pub fn local_followers(&self) -> impl Iterator<Item = usize> + '_ {
        self.plan
            .hosts
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, host)| ClusterConfig::is_local(host))
            .map(|(rank, _)| rank)
    }

    /// The ranks on other hosts, by host.
    pub fn remote_ranks(&self) -> impl Iterator<Item = (usize, &str)> + '_ {
        self.plan
            .hosts
            .iter()
            .enumerate()
            .filter(|(_, host)| !ClusterConfig::is_local(host))
            .map(|(rank, host)| (rank, host.as_str()))
    }

    /// Rank `rank`, process `pid`, on this host; `ended` for ranks other than 0.
    pub fn rank(&self, rank: usize, pid: u32, ended: Option<RankEnded>) -> Rank {
        Rank {
            rank,
            host: "localhost".to_owned(),
            pid,
            reported_footprint: None,
            ended,
        }
    }

    /// Makes `command` rank `rank` of the group.
    pub fn join_as(&self, command: &mut Command, rank: usize) {
        self.hostfile.join_as(command, rank, self.plan.parallel);
    }
}

fn loopback_ring(size: usize) -> io::Result<Vec<Vec<String>>> {
    let listeners = (0..size)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|listener| Ok(vec![listener.local_addr()?.to_string()]))
        .collect()
}

fn write_private(path: &Path, body: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(body)
}

/// Ties rank `rank` (`follower`) to rank 0 (`leader`): the first of them to end ends the other,
/// and a `silenced` follower ends both. The follower's pid record in `run_dir` goes once it is
/// reaped, and its end is told; only this task signals it, so no signal can reach a recycled
/// pid.
pub fn tie(
    mut follower: Child,
    leader: WorkerProcess,
    mut silenced: oneshot::Receiver<()>,
    (model, rank): (String, usize),
    run_dir: RunDir,
) -> RankEnded {
    let (ends, ended) = watch::channel(None);
    tokio::spawn(async move {
        let pid = follower.id().unwrap_or(0);
        let status = tokio::select! {
            status = follower.wait() => {
                tracing::warn!(model, rank, pid, ?status, "a rank of the worker group ended; ending the group");
                leader.signal(Signal::SIGKILL);
                status
            }
            _ = leader.wait() => end(&mut follower, &model, rank).await,
            Ok(()) = &mut silenced => {
                leader.signal(Signal::SIGKILL);
                end(&mut follower, &model, rank).await
            }
        };
        if let Err(error) = run_dir.remove_record(pid) {
            tracing::warn!(model, rank, pid, %error, "cannot remove the rank's pid record");
        }
        let status = match status {
            Ok(status) => status.to_string(),
            Err(error) => error.to_string(),
        };
        let _ = ends.send(RankEnd::confirmed(status));
    });
    ended
}

/// Kills `follower` and reaps it.
async fn end(follower: &mut Child, model: &str, rank: usize) -> io::Result<ExitStatus> {
    if let Err(error) = follower.start_kill() {
        tracing::debug!(model, rank, %error, "the rank had ended already");
    }
    follower.wait().await
}

/// Reads the heartbeats rank `pid` writes to its stdout; fires if the rank is silent for
/// `timeout`. A silent rank is stopped or hung, and every other rank waits on it in a
/// collective, so its group must end.
pub fn silence(
    beats: Option<ChildStdout>,
    pid: u32,
    model: &str,
    timeout: Duration,
) -> oneshot::Receiver<()> {
    let (silenced, silence) = oneshot::channel();
    let Some(mut beats) = beats else {
        return silence;
    };
    let model = model.to_owned();
    tokio::spawn(async move {
        let mut buffer = [0u8; 64];
        loop {
            match tokio::time::timeout(timeout, beats.read(&mut buffer)).await {
                Ok(Ok(read)) if read > 0 => {}
                // The rank has ended, which its reaper or its tie reports.
                Ok(_) => return,
                Err(_) => {
                    tracing::error!(
                        model,
                        pid,
                        timeout_s = timeout.as_secs_f64(),
                        "a rank of the worker group sent no heartbeat in time; ending the group as hung"
                    );
                    let _ = silenced.send(());
                    return;
                }
            }
        }
    });
    silence
}

/// Ends rank 0 (`leader`) when it falls `silenced`.
pub fn end_when_silent(leader: &WorkerProcess, silenced: oneshot::Receiver<()>) {
    let leader = leader.clone();
    tokio::spawn(async move {
        if silenced.await.is_ok() {
            leader.signal(Signal::SIGKILL);
        }
    });
}
