//! A worker group's ranks step identical batches in lockstep. Rank 0 alone hears the
//! supervisor; before each step it tells every rank, through MLX's collectives, which requests
//! join the batch and which were cancelled. Every rank's batch then takes the same decisions
//! (where one rests on a rank's own clock or memory, rank 0's stands: [`rank_zeros`]) and runs
//! the same passes, whose layers the ranks share (`model::Pipeline`); only rank 0's events leave
//! the process.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use anyhow::Result;
use corral_ipc::GenerateRequest as WireRequest;
use serde::{Deserialize, Serialize};

use crate::batch::{Batch, Job};
use crate::distributed::Group;
use crate::engine::{EngineOptions, EventSink, Gauges, Submitted, arrivals, gauged};
use crate::generation::Event;
use crate::loaded::LoadedModel;
use crate::wire::to_generate_request;

/// What rank 0 tells every rank before a step.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Round {
    /// Requests that join the batch now, each with the id later rounds name it by.
    arrivals: Vec<(u64, WireRequest)>,
    /// Requests whose clients left since the last round.
    cancelled: Vec<u64>,
    /// Rank 0's queue has closed: finish what the batch holds, then stop.
    closing: bool,
}

/// Rank 0's `yes`, on every rank of `group`. A group whose collectives fail has lost a rank,
/// and this one ends rather than run on alone.
pub(crate) fn rank_zeros(group: &Group, yes: bool) -> bool {
    match group.broadcast(&[u8::from(yes)]) {
        Ok(agreed) => agreed.first() == Some(&1),
        Err(error) => lost_the_group(&error.to_string()),
    }
}

fn lost_the_group(error: &str) -> ! {
    tracing::error!(%error, "the worker group lost a rank; this rank ends");
    std::process::exit(EXIT_GROUP_LOST)
}

/// How a rank ends when its group's collectives fail.
const EXIT_GROUP_LOST: i32 = 75;

/// Each request's cancellation as every rank sees it: set only between steps, from a round.
#[derive(Default)]
struct Agreed {
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
    fn job(
        &mut self,
        id: u64,
        request: crate::generation::GenerateRequest,
        client: Option<Arc<AtomicBool>>,
        mut sink: EventSink,
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
    fn newly_cancelled(&self) -> Vec<u64> {
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

    fn cancel(&mut self, ids: &[u64]) {
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
                    std::process::exit(EXIT_GROUP_LOST);
                }
                std::thread::sleep(HEARTBEAT);
            }
        });
    if let Err(error) = beating {
        tracing::error!(%error, "cannot start the heartbeat thread");
    }
}

/// Rank 0's round, on every rank.
fn exchange(group: &Group, round: &Round) -> Round {
    let shared = corral_ipc::encode_frame(round)
        .map_err(|error| error.to_string())
        .and_then(|bytes| group.broadcast(&bytes).map_err(|error| error.to_string()));
    let decoded = shared.and_then(|bytes| {
        corral_ipc::decode_frame::<Round>(&bytes)
            .map_err(|error| error.to_string())?
            .map(|(round, _)| round)
            .ok_or_else(|| "a truncated round".to_owned())
    });
    decoded.unwrap_or_else(|error| lost_the_group(&error))
}

/// Rank 0's engine loop: each step begins with the round it tells the other ranks. Ends when
/// the queue has closed and the batch has finished what it holds.
pub(crate) fn lead(
    mut batch: Batch<'_, '_, '_>,
    jobs: &mpsc::Receiver<Submitted>,
    gauges: &Arc<Gauges>,
    group: &Group,
) {
    let mut agreed = Agreed::default();
    let mut next_id = 0;
    let mut open = true;
    loop {
        let arrivals = arrivals(jobs, batch.is_idle(), &mut open);
        let mut round = Round {
            cancelled: agreed.newly_cancelled(),
            closing: !open,
            ..Round::default()
        };
        let mut jobs_now = Vec::new();
        for submitted in arrivals {
            let (id, submitted) = (next_id, seeded(submitted));
            next_id += 1;
            let Submitted {
                request,
                wire,
                cancel,
                sink,
            } = submitted;
            let Some(wire) = wire else {
                tracing::error!("a request reached the group without its wire form");
                continue;
            };
            round.arrivals.push((id, *wire));
            jobs_now.push((id, request, cancel, gauged(sink, gauges)));
        }
        exchange(group, &round);
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

/// A request with a seed: every rank samples each token from the same logits, so an unseeded
/// request gets one here, once, for all of them.
fn seeded(mut submitted: Submitted) -> Submitted {
    if submitted.request.sampling.seed.is_none() {
        let seed = RandomState::new().hash_one(next_seed_salt());
        submitted.request.sampling.seed = Some(seed);
        if let Some(wire) = submitted.wire.as_mut() {
            wire.seed = Some(seed);
        }
    }
    submitted
}

fn next_seed_salt() -> std::time::SystemTime {
    std::time::SystemTime::now()
}

/// A rank other than 0: loads its share of the model, then steps its batch as each of rank 0's
/// rounds says, until rank 0 closes. Its events go nowhere.
pub fn follow(model: PathBuf, options: EngineOptions, group: Arc<Group>) -> Result<()> {
    let loaded = LoadedModel::load_with(
        &model,
        options.gguf,
        options.projector.as_deref(),
        Some(group.clone()),
    );
    let everywhere = crate::engine::loaded_everywhere(&group, loaded.is_ok());
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
    let limits = crate::engine::batch_limits(&loaded, &options);
    let mut batch = Batch::new(&loaded, limits, options.memory_limit, None);
    let mut agreed = Agreed::default();
    loop {
        let round = exchange(&group, &Round::default());
        for (id, wire) in round.arrivals {
            let request = to_generate_request(Box::new(wire));
            batch.submit(agreed.job(id, request, None, Box::new(|_| {})));
        }
        agreed.cancel(&round.cancelled);
        batch.step();
        if round.closing && batch.is_idle() {
            return Ok(());
        }
    }
}
