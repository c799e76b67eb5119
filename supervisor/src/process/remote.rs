//! The coordinator's side of a rank on another host: its member is asked to start it, and it is
//! then tied to rank 0 as a local follower is. Its end (the member says so, or the member's
//! connection is lost) ends the group; silence past the heartbeat timeout ends the group as hung;
//! rank 0's end stops it there, and the member confirms.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::{mpsc, watch};

use super::client::{Rank, RankEnd};
use super::reaper::WorkerProcess;
use crate::cluster::{
    Channel, ChannelError, ChannelWriter, Cluster, FromMember, RankStart, ToMember,
};

/// How long a member has to say that the rank it ran for an ended group is gone.
pub(super) const STOP_CONFIRM: Duration = Duration::from_secs(10);

/// Why a group lost a rank on another host, where it did: a start that fails for it names the
/// host and this reason rather than rank 0's end alone.
pub type LostRank = Arc<Mutex<Option<String>>>;

pub struct RemoteRank {
    rank: usize,
    host: String,
    pid: u32,
    channel: Channel,
}

/// Asks `host`'s member to start `start`'s rank; the error names the host and why.
pub async fn start(cluster: &Cluster, host: &str, start: RankStart) -> Result<RemoteRank, String> {
    let rank = start.rank;
    let mut channel = cluster.connect(host).await?;
    let failed = |what: String| format!("host {host:?}, rank {rank}: {what}");
    channel
        .send(&ToMember::Start(start))
        .await
        .map_err(|error| failed(error.to_string()))?;
    match channel.recv::<FromMember>().await {
        Ok(Some(FromMember::Started { pid })) => Ok(RemoteRank {
            rank,
            host: host.to_owned(),
            pid,
            channel,
        }),
        Ok(Some(FromMember::Refused(reason))) => Err(failed(reason)),
        Ok(Some(other)) => Err(failed(format!("answered {other:?} to a start"))),
        Ok(None) => Err(failed(
            "closed the connection before starting the rank".to_owned(),
        )),
        Err(error) => Err(failed(error.to_string())),
    }
}

impl RemoteRank {
    /// Ties the rank to rank 0 (`leader`) for as long as either lives; the rank as listed.
    pub fn tie(
        self,
        leader: WorkerProcess,
        heartbeat_timeout: Duration,
        model: &str,
        lost: &LostRank,
    ) -> Rank {
        let footprint = Arc::new(AtomicU64::new(0));
        let (ends, ended) = watch::channel(None);
        let listed = Rank {
            rank: self.rank,
            host: self.host.clone(),
            pid: self.pid,
            reported_footprint: Some(footprint.clone()),
            ended: Some(ended),
        };
        let (mut reader, writer) = self.channel.split();
        let (events, received) = mpsc::unbounded_channel();
        // Frames are read apart from the waiting below, so no frame is cut when it gives up.
        tokio::spawn(async move {
            loop {
                let frame = reader.recv::<FromMember>().await;
                let last = !matches!(frame, Ok(Some(_)));
                if events.send(frame).is_err() || last {
                    return;
                }
            }
        });
        let watched = Watched {
            model: model.to_owned(),
            rank: self.rank,
            host: self.host,
            pid: self.pid,
        };
        let lost = lost.clone();
        tokio::spawn(async move {
            let end = watched
                .watch(
                    leader,
                    (received, writer),
                    (footprint, heartbeat_timeout),
                    lost,
                )
                .await;
            let _ = ends.send(end);
        });
        listed
    }
}

/// How a group's tie to its rank on another host came undone.
enum Undone {
    /// Rank 0 ended; the rank is to be stopped there.
    LeaderEnded,
    /// The rank exited 0, as ranks do when their group shuts down; rank 0 is ending too.
    RankEnded(String),
    /// The rank, its host or the connection failed: the group must end. `reaped`: its member
    /// said the rank has ended.
    Lost { why: String, reaped: bool },
}

/// A rank on another host, for the log.
struct Watched {
    model: String,
    rank: usize,
    host: String,
    pid: u32,
}

type Frames = mpsc::UnboundedReceiver<Result<Option<FromMember>, ChannelError>>;

impl Watched {
    /// Watches until the group or the rank ends; the rank's end, as far as its member
    /// confirmed it.
    async fn watch(
        self,
        leader: WorkerProcess,
        (mut received, mut writer): (Frames, ChannelWriter),
        (footprint, heartbeat_timeout): (Arc<AtomicU64>, Duration),
        lost: LostRank,
    ) -> Option<RankEnd> {
        let Self {
            model,
            rank,
            host,
            pid,
        } = &self;
        let undone = loop {
            let event = tokio::select! {
                _ = leader.wait() => break Undone::LeaderEnded,
                event = tokio::time::timeout(heartbeat_timeout, received.recv()) => event,
            };
            let frame = match event {
                Ok(Some(Ok(Some(frame)))) => frame,
                Ok(Some(Ok(None)) | None) => {
                    break Undone::Lost {
                        why: "its host closed the connection".to_owned(),
                        reaped: false,
                    };
                }
                Ok(Some(Err(error))) => {
                    break Undone::Lost {
                        why: error.to_string(),
                        reaped: false,
                    };
                }
                Err(_) => {
                    break Undone::Lost {
                        why: format!(
                            "no heartbeat in {} s: the rank or its host is hung",
                            heartbeat_timeout.as_secs_f64()
                        ),
                        reaped: false,
                    };
                }
            };
            match frame {
                FromMember::Beat { footprint: bytes } => {
                    footprint.store(bytes.unwrap_or(0), Ordering::Relaxed);
                }
                FromMember::Ended {
                    status,
                    clean: true,
                } => break Undone::RankEnded(status),
                FromMember::Ended { status, .. } => {
                    break Undone::Lost {
                        why: format!("the rank ended with {status}"),
                        reaped: true,
                    };
                }
                other => tracing::debug!(
                    model,
                    rank,
                    host,
                    ?other,
                    "an unexpected frame from a member"
                ),
            }
        };
        match undone {
            Undone::Lost { why, reaped } => {
                tracing::error!(
                    model,
                    rank,
                    host,
                    pid,
                    why,
                    "a rank of the worker group on another host is lost; ending the group"
                );
                *lost.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(format!("host {host:?}, rank {rank}: {why}"));
                leader.signal(Signal::SIGKILL);
                Some(RankEnd {
                    status: why,
                    confirmed: reaped,
                })
            }
            Undone::RankEnded(status) => {
                tracing::info!(
                    model,
                    rank,
                    host,
                    pid,
                    status,
                    "the group's rank on another host ended with its group"
                );
                if tokio::time::timeout(STOP_CONFIRM, leader.wait())
                    .await
                    .is_err()
                {
                    tracing::warn!(
                        model,
                        rank,
                        host,
                        pid,
                        "rank 0 outlived its group's rank on another host; ending it"
                    );
                    leader.signal(Signal::SIGKILL);
                }
                RankEnd::confirmed(status)
            }
            Undone::LeaderEnded => {
                let confirmed = tokio::time::timeout(STOP_CONFIRM, async {
                    writer.send(&ToMember::Stop).await?;
                    while let Some(frame) = received.recv().await {
                        if let Some(FromMember::Ended { status, .. }) = frame? {
                            return Ok(status);
                        }
                    }
                    Err(ChannelError::Io(std::io::ErrorKind::UnexpectedEof.into()))
                })
                .await;
                match confirmed {
                    Ok(Ok(status)) => {
                        tracing::info!(
                            model,
                            rank,
                            host,
                            pid,
                            status,
                            "the group's rank on another host ended"
                        );
                        RankEnd::confirmed(status)
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(model, rank, host, pid, %error, "the member did not confirm the rank's end; it ends a rank whose connection closes");
                        RankEnd::unconfirmed(format!("not confirmed: {error}"))
                    }
                    Err(_) => {
                        tracing::warn!(
                            model,
                            rank,
                            host,
                            pid,
                            "the member did not confirm the rank's end in time; it ends a rank whose connection closes"
                        );
                        RankEnd::unconfirmed(format!(
                            "not confirmed within {} s",
                            STOP_CONFIRM.as_secs()
                        ))
                    }
                }
            }
        }
    }
}
