//! A worker group on this host: one model served by several `corral-worker serve --pipeline`
//! ranks, which MLX's ring backend joins over loopback. Rank 0 is the worker the pool knows (its
//! socket, its leases, its exit); every other rank is tied to it, so that when either ends the
//! other is ended too and the group lives and dies as one worker.

use std::io;
use std::net::TcpListener;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::oneshot;

use super::client::Rank;
use super::reaper::WorkerProcess;
use super::run_dir::{RunDir, SlotName};

/// How long a rank may stay silent by default; it beats every second.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(30);

/// The ring's addresses for one start of a group, in a host file only this user can read;
/// removed when the start is over (the ranks read it as they join).
/// How many ranks on this host serve a model together, and how they split it (the worker's
/// `--parallel`: `pipeline` or `tensor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupPlan {
    pub ranks: usize,
    pub parallel: &'static str,
}

impl GroupPlan {
    /// A worker of its own.
    pub const ALONE: Self = Self {
        ranks: 1,
        parallel: "pipeline",
    };
}

pub struct LocalGroup {
    hostfile: PathBuf,
    size: usize,
    parallel: &'static str,
}

impl LocalGroup {
    /// `plan`'s ranks of `slot`'s model on loopback ports the system hands out now.
    pub fn prepare(run_dir: &RunDir, slot: &SlotName, plan: GroupPlan) -> io::Result<Self> {
        let size = plan.ranks;
        let listeners = (0..size)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<io::Result<Vec<_>>>()?;
        let hosts = listeners
            .iter()
            .map(|listener| Ok(vec![listener.local_addr()?.to_string()]))
            .collect::<io::Result<Vec<Vec<String>>>>()?;
        drop(listeners);
        let hostfile = run_dir.path().join(format!("{}.hosts.json", slot.as_str()));
        let body = serde_json::to_vec(&hosts).map_err(io::Error::other)?;
        write_private(&hostfile, &body)?;
        Ok(Self {
            hostfile,
            size,
            parallel: plan.parallel,
        })
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Rank `rank`, process `pid`, on this host.
    pub fn rank(&self, rank: usize, pid: u32) -> Rank {
        Rank {
            rank,
            host: "localhost".to_owned(),
            pid,
        }
    }

    /// Makes `command` rank `rank` of the group.
    pub fn join_as(&self, command: &mut Command, rank: usize) {
        command
            .args(["--parallel", self.parallel])
            .env(corral_ipc::GROUP_RANK_ENV, rank.to_string())
            .env(corral_ipc::GROUP_HOSTFILE_ENV, &self.hostfile);
    }
}

impl Drop for LocalGroup {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_file(&self.hostfile)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.hostfile.display(), %error, "cannot remove the group's host file");
        }
    }
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
/// reaped; only this task signals it, so no signal can reach a recycled pid.
pub fn tie(
    mut follower: Child,
    leader: WorkerProcess,
    mut silenced: oneshot::Receiver<()>,
    (model, rank): (String, usize),
    run_dir: RunDir,
) {
    tokio::spawn(async move {
        let pid = follower.id().unwrap_or(0);
        let end_follower = tokio::select! {
            status = follower.wait() => {
                tracing::warn!(model, rank, pid, ?status, "a rank of the worker group ended; ending the group");
                leader.signal(Signal::SIGKILL);
                false
            }
            _ = leader.wait() => true,
            Ok(()) = &mut silenced => {
                leader.signal(Signal::SIGKILL);
                true
            }
        };
        if end_follower {
            if let Err(error) = follower.start_kill() {
                tracing::debug!(model, rank, pid, %error, "the rank had ended already");
            }
            let _ = follower.wait().await;
        }
        if let Err(error) = run_dir.remove_record(pid) {
            tracing::warn!(model, rank, pid, %error, "cannot remove the rank's pid record");
        }
    });
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
