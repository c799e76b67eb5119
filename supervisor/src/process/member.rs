//! This host's member side: with `[cluster] listen` set, `corral serve` takes rank starts from
//! the coordinators `[cluster] coordinators` names. A start names a model by id, which this
//! host's own discovery finds (no path crosses the wire); its files must hash as the
//! coordinator's do. The rank runs as long as the connection that started it: the
//! coordinator's `Stop`, or its connection's end, ends the rank, and the rank's end is reported
//! back. Each heartbeat the rank writes goes on to the coordinator with the rank's footprint.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use anyhow::Context;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::process::ChildStdout;
use tokio::sync::mpsc;

use super::spawn::{MemberRank, Spawner};
use crate::cluster::{Channel, Cluster, FromMember, ModelDigest, RankStart, ToMember};
use crate::memory::{estimate_model_bytes, process_footprint};
use crate::pool::{Refusal, Reservation};

/// Holds a rank's share of this host's memory budget while it runs, once idle workers have
/// stopped to make room, or says why there is no room for it.
pub type RankRoom = Arc<
    dyn Fn(u64) -> Pin<Box<dyn Future<Output = Result<Reservation, Refusal>> + Send>> + Send + Sync,
>;

pub struct Member {
    spawner: Spawner,
    cluster: Arc<Cluster>,
    room: RankRoom,
}

impl Member {
    /// Listens at `address` and serves each coordinator that connects, from a task of its own.
    pub async fn listen(
        spawner: Spawner,
        cluster: Arc<Cluster>,
        address: SocketAddr,
        room: RankRoom,
    ) -> anyhow::Result<()> {
        let listener = TcpListener::bind(address).await.with_context(|| {
            format!("listening for coordinators on {address} ([cluster] listen)")
        })?;
        tracing::info!(
            %address,
            key = %cluster.identity().public(),
            "taking rank starts from coordinating hosts"
        );
        let member = Arc::new(Self {
            spawner,
            cluster,
            room,
        });
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, from)) => {
                        tokio::spawn(member.clone().serve(stream, from));
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cannot accept a coordinator's connection");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                }
            }
        });
        Ok(())
    }

    async fn serve(self: Arc<Self>, stream: TcpStream, from: SocketAddr) {
        let mut channel = match Channel::accept(stream, self.cluster.identity()).await {
            Ok(channel) => channel,
            Err(error) => {
                tracing::warn!(%from, %error, "a cluster connection failed its handshake");
                return;
            }
        };
        let peer = channel.peer();
        if !self.cluster.config().coordinators.contains(&peer) {
            tracing::warn!(%from, %peer, "refused a coordinator whose key is not in [cluster] coordinators");
            let refusal = FromMember::Refused(format!(
                "this host takes no ranks from key {peer}: add it to [cluster] coordinators there"
            ));
            let _ = channel.send(&refusal).await;
            return;
        }
        let start = match channel.recv::<ToMember>().await {
            Ok(Some(ToMember::Start(start))) => start,
            Ok(other) => {
                tracing::debug!(%from, ?other, "a coordinator left before starting a rank");
                return;
            }
            Err(error) => {
                tracing::warn!(%from, %error, "cannot read a coordinator's start");
                return;
            }
        };
        match self.start(&start).await {
            Ok(child) => self.run(child, channel, &start).await,
            Err(reason) => {
                tracing::warn!(%from, model = start.model, rank = start.rank, reason, "refused a rank start");
                let _ = channel.send(&FromMember::Refused(reason)).await;
            }
        }
    }

    async fn start(&self, start: &RankStart) -> Result<RankChild, String> {
        let model = &start.model;
        start.collectives.check()?;
        let ranks = start.collectives.ranks();
        if start.rank == 0 || start.rank >= ranks {
            return Err(format!(
                "rank {} is not one a member runs in a group of {ranks}",
                start.rank
            ));
        }
        let dir = self
            .spawner
            .find(model)
            .map_err(|reason| format!("this host serves no model {model:?}: {reason}"))?;
        let digest_dir = dir.clone();
        let (here, estimate) = tokio::task::spawn_blocking(move || {
            let estimate =
                estimate_model_bytes(&digest_dir, None).map_err(|error| error.to_string())?;
            let digest = ModelDigest::of(&digest_dir).map_err(|error| format!("{error:#}"))?;
            Ok::<_, String>((digest, estimate))
        })
        .await
        .map_err(|error| error.to_string())??;
        if let Some(difference) = start.files.difference(&here) {
            return Err(format!(
                "the model {model:?} here ({}) is not the coordinator's: {difference}",
                dir.display()
            ));
        }
        // Admission on this host: the rank's share of the model, against this host's budget.
        let share = estimate.rank_share(ranks as u64);
        let reservation = (self.room)(share).await.map_err(|refusal| {
            format!(
                "no room for rank {} of {model:?} on this host: {refusal}",
                start.rank
            )
        })?;
        check_flags(&start.settings.flags)?;
        if let Some(draft) = &start.settings.draft {
            self.spawner
                .find(draft)
                .map_err(|reason| format!("this host serves no draft model {draft:?}: {reason}"))?;
        }
        let parallel = match start.parallel.as_str() {
            "pipeline" => "pipeline",
            "tensor" => "tensor",
            other => return Err(format!("no parallelism {other:?}")),
        };
        let rank = self
            .spawner
            .spawn_member_rank(
                model,
                &dir,
                (start.rank, parallel, &start.collectives),
                start.memory_limit,
                &start.settings,
            )
            .map_err(|error| format!("cannot start the rank: {error}"))?;
        Ok(RankChild {
            rank,
            _reservation: reservation,
        })
    }

    async fn run(&self, started: RankChild, channel: Channel, start: &RankStart) {
        // The host file and the reservation are held until the rank has ended.
        let RankChild {
            rank:
                MemberRank {
                    mut child,
                    hostfile: _hostfile,
                    last_error,
                },
            _reservation,
        } = started;
        let (model, index) = (start.model.as_str(), start.rank);
        let pid = child.id().unwrap_or(0);
        tracing::info!(
            model,
            rank = index,
            pid,
            "started a rank for a coordinating host"
        );
        let (mut reader, mut writer) = channel.split();
        let mut connected = writer.send(&FromMember::Started { pid }).await.is_ok();
        let (orders, mut ordered) = mpsc::unbounded_channel();
        let reading = tokio::spawn(async move {
            while let Ok(Some(order)) = reader.recv::<ToMember>().await {
                if orders.send(order).is_err() {
                    return;
                }
            }
        });
        let mut beats = child.stdout.take();
        let mut buffer = [0u8; 64];
        let status = loop {
            if !connected {
                if let Err(error) = child.start_kill() {
                    tracing::debug!(model, pid, %error, "the rank had ended already");
                }
                break child.wait().await;
            }
            tokio::select! {
                status = child.wait() => break status,
                order = ordered.recv() => {
                    // A stop, or the coordinator gone: the rank's group has ended.
                    connected = matches!(order, Some(ToMember::Start(_)));
                }
                beat = read_beat(&mut beats, &mut buffer) => {
                    if beat {
                        let footprint = process_footprint(pid).ok();
                        connected = writer.send(&FromMember::Beat { footprint }).await.is_ok();
                    } else {
                        // Its stdout is closed: the rank is ending, which the wait reports.
                        beats = None;
                    }
                }
            }
        };
        reading.abort();
        let (mut status, clean) = match status {
            Ok(status) => (status.to_string(), status.success()),
            Err(error) => (error.to_string(), false),
        };
        if let Some(said) = last_error.get().await {
            status = format!("{status}: {said}");
        }
        tracing::info!(
            model,
            rank = index,
            pid,
            status,
            "the rank for a coordinating host ended"
        );
        let _ = writer.send(&FromMember::Ended { status, clean }).await;
        self.spawner.forget_record(pid);
    }
}

/// A started rank, and its share of this host's budget, given up with it.
struct RankChild {
    rank: MemberRank,
    _reservation: Reservation,
}

/// Whether the rank wrote a heartbeat; `false` once its stdout is closed. Never ends without
/// a stdout.
async fn read_beat(beats: &mut Option<ChildStdout>, buffer: &mut [u8]) -> bool {
    match beats {
        Some(beats) => matches!(beats.read(buffer).await, Ok(read) if read > 0),
        None => std::future::pending().await,
    }
}

/// The `corral-worker serve` options a coordinator may set for a rank here: settings, none
/// naming a file, each with the kind of value it takes.
const RANK_FLAGS: [(&str, bool); 9] = [
    ("--max-sequences", true),
    ("--prefill-chunk", true),
    ("--gguf-requantize", true),
    ("--gguf-exact-k-quants", false),
    ("--max-images", true),
    ("--image-max-pixels", true),
    ("--image-min-pixels", true),
    ("--draft-tokens", true),
    ("--speculative", true),
];

/// Refuses options a coordinator may not set here: an unknown flag, or a value that is not a
/// plain word (so no value can pass for another option or a path).
pub fn check_flags(flags: &[String]) -> Result<(), String> {
    let mut flags = flags.iter();
    while let Some(flag) = flags.next() {
        let Some(&(_, takes_value)) = RANK_FLAGS.iter().find(|(name, _)| name == flag) else {
            return Err(format!("a coordinator may not set {flag:?} for a rank"));
        };
        if takes_value {
            let plain = |value: &&String| {
                !value.is_empty()
                    && value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
            };
            if flags.next().filter(plain).is_none() {
                return Err(format!("{flag} needs a plain value"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinator_sets_only_settings_with_plain_values() {
        let flags = |text: &str| text.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            check_flags(&flags(
                "--max-sequences 8 --gguf-exact-k-quants --speculative ngram"
            )),
            Ok(())
        );
        for (bad, reason) in [
            ("--prefix-cache-dir /etc", "may not set"),
            ("--max-sequences --mmproj", "plain value"),
            ("--gguf-requantize ../x", "plain value"),
            ("--draft-tokens", "plain value"),
        ] {
            let error = check_flags(&flags(bad)).unwrap_err();
            assert!(error.contains(reason), "{bad}: {error}");
        }
    }
}
