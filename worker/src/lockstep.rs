//! A worker group's ranks step identical batches in lockstep. Rank 0 alone hears the
//! supervisor; before each step it tells every rank, through MLX's collectives, which requests
//! join the batch and which were cancelled. Every rank's batch then takes the same decisions
//! (where one rests on a rank's own clock or memory, rank 0's stands: `Group::rank_zeros`) and
//! runs the same passes, whose layers the ranks share (`model::Pipeline`); only rank 0's events
//! leave the process. The loops are the engine's (`engine::lead`, `engine::follow`); these are
//! the pieces they agree with.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use corral_ipc::GenerateRequest as WireRequest;
use serde::{Deserialize, Serialize};

use crate::batch::{Job, Sink};
use crate::distributed::{self, Group};
use crate::generation::{Event, GenerateRequest};

/// What rank 0 tells every rank before a step.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Round {
    /// Requests that join the batch now, each with the id later rounds name it by.
    pub(crate) arrivals: Vec<(u64, WireRequest)>,
    /// Requests whose clients left since the last round.
    pub(crate) cancelled: Vec<u64>,
    /// Rank 0's queue has closed: finish what the batch holds, then stop.
    pub(crate) closing: bool,
}

/// Each request's cancellation as every rank sees it: set only between steps, from a round.
#[derive(Default)]
pub(crate) struct Agreed {
    flags: HashMap<u64, Flags>,
}

struct Flags {
    cancelled: Arc<AtomicBool>,
    ended: Arc<AtomicBool>,
    /// The client's own flag, read by rank 0 only.
    client: Option<Arc<AtomicBool>>,
}

impl Agreed {
    /// The job for request `id`: `sink` sees its events, its cancellation is the group's.
    pub(crate) fn job(
        &mut self,
        id: u64,
        request: GenerateRequest,
        client: Option<Arc<AtomicBool>>,
        mut sink: Sink<'static>,
    ) -> Job<'static> {
        let cancelled = Arc::new(AtomicBool::new(false));
        let ended = Arc::new(AtomicBool::new(false));
        let flags = Flags {
            cancelled: cancelled.clone(),
            ended: ended.clone(),
            client,
        };
        self.flags.insert(id, flags);
        Job {
            request,
            cancelled: Box::new(move || cancelled.load(Ordering::Relaxed)),
            sink: Box::new(move |event| {
                if matches!(event, Ok(Event::Done { .. }) | Err(_)) {
                    ended.store(true, Ordering::Relaxed);
                }
                sink(event);
            }),
        }
    }

    /// The requests whose clients left since the last round (rank 0).
    pub(crate) fn newly_cancelled(&self) -> Vec<u64> {
        self.flags
            .iter()
            .filter(|(_, flags)| {
                let client = flags.client.as_ref();
                client.is_some_and(|client| client.load(Ordering::Relaxed))
                    && !flags.cancelled.load(Ordering::Relaxed)
            })
            .map(|(id, _)| *id)
            .collect()
    }

    pub(crate) fn cancel(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(flags) = self.flags.get(id) {
                flags.cancelled.store(true, Ordering::Relaxed);
            }
        }
        self.flags
            .retain(|_, flags| !flags.ended.load(Ordering::Relaxed));
    }
}

/// How often a rank tells its supervisor it lives.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(1);

/// Writes a heartbeat to stdout every second from a thread of its own, for the supervisor,
/// which ends a group whose rank falls silent (stopped, or hung whole). A closed stdout means
/// the supervisor is gone, and so this rank goes too.
pub fn beat_on_stdout() {
    let beating = std::thread::Builder::new()
        .name("heartbeat".into())
        .spawn(|| {
            let mut stdout = std::io::stdout();
            loop {
                if stdout
                    .write_all(b"\n")
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    std::process::exit(distributed::EXIT_GROUP_LOST);
                }
                std::thread::sleep(HEARTBEAT);
            }
        });
    if let Err(error) = beating {
        tracing::error!(%error, "cannot start the heartbeat thread");
    }
}

/// Rank 0's round, on every rank.
pub(crate) fn exchange(group: &Group, round: &Round) -> Round {
    let shared = corral_ipc::encode_frame(round)
        .map_err(|error| error.to_string())
        .and_then(|bytes| group.broadcast(&bytes).map_err(|error| error.to_string()));
    let decoded = shared.and_then(|bytes| {
        corral_ipc::decode_frame::<Round>(&bytes)
            .map_err(|error| error.to_string())?
            .map(|(round, _)| round)
            .ok_or_else(|| "a truncated round".to_owned())
    });
    decoded.unwrap_or_else(|error| distributed::lost(&error))
}

/// Gives an unseeded request a seed, in both its forms: every rank samples each token from the
/// same logits, so each must draw as rank 0 does.
pub(crate) fn seed(request: &mut GenerateRequest, wire: &mut WireRequest) {
    if request.sampling.seed.is_none() {
        let seed = RandomState::new().hash_one(next_seed_salt());
        request.sampling.seed = Some(seed);
        wire.seed = Some(seed);
    }
}

fn next_seed_salt() -> std::time::SystemTime {
    std::time::SystemTime::now()
}
