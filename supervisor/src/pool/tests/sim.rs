//! Test doubles: simulated worker processes whose starts take a set time and succeed, fail or
//! panic as the test queues them, whose stops end them (or hang, for a frozen worker) and report
//! the exit as a reaper would, with set footprints and estimates; and a small seeded RNG for the
//! schedule tests.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::super::processes::{LaunchError, LaunchedWorker, Processes, StopOrder};
use super::super::state::{ExitStatus, Worker};
use super::super::{Limits, Pool};
use crate::memory::Budget;

/// What the next launch does; `Ready` once the queue is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimOutcome {
    Ready,
    LoadFails,
    /// The worker finds that the model's files can never load.
    Unservable,
    Panics,
}

/// What happened, in order, for tests that check the order of stops and starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimEvent {
    Launched(String),
    StopOrdered(String, u32),
    Exited(String, u32),
}

/// Clones share their state, so a test keeps one while the pool owns the other.
#[derive(Clone, Default)]
pub struct SimProcesses {
    delay: Duration,
    launches: Arc<AtomicU32>,
    outcomes: Arc<Mutex<VecDeque<SimOutcome>>>,
    estimates: Arc<Mutex<HashMap<String, u64>>>,
    footprints: Arc<Mutex<HashMap<u32, u64>>>,
    /// Models whose workers ignore every stop, as a worker frozen by SIGSTOP would.
    frozen: Arc<Mutex<HashSet<String>>>,
    events: Arc<Mutex<Vec<SimEvent>>>,
    exits: Arc<Mutex<Option<mpsc::UnboundedSender<SimExit>>>>,
}

/// An exit on its way to the pool, acknowledged once applied, as the real reaper's are.
type SimExit = (String, u32, ExitStatus, oneshot::Sender<()>);

/// Simulated pids start here, far from real ones, and are never reused.
const FIRST_PID: u32 = 10_000;

/// A budget no test reaches unless it means to.
pub fn roomy() -> Limits {
    Limits {
        budget: Budget::new(u64::MAX / 2, 0.85, 0.95),
        max_loaded_models: None,
    }
}

impl SimProcesses {
    pub fn with_delay(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::default()
        }
    }

    /// A pool over these processes, whose exits reach it as the real reaper's do.
    pub fn pool(&self, limits: Limits) -> Pool<SimProcesses> {
        let pool = Pool::new(self.clone(), limits);
        let (exits, mut incoming) = mpsc::unbounded_channel::<SimExit>();
        *self.exits.lock().unwrap() = Some(exits);
        let follower = pool.clone();
        tokio::spawn(async move {
            while let Some((model, pid, status, noted)) = incoming.recv().await {
                follower.on_exit(&model, pid, status);
                let _ = noted.send(());
            }
        });
        pool
    }

    pub fn then(&self, outcome: SimOutcome) -> &Self {
        self.outcomes.lock().unwrap().push_back(outcome);
        self
    }

    pub fn estimate_of(&self, model: &str, bytes: u64) -> &Self {
        self.estimates
            .lock()
            .unwrap()
            .insert(model.to_owned(), bytes);
        self
    }

    pub fn freeze(&self, model: &str) {
        self.frozen.lock().unwrap().insert(model.to_owned());
    }

    pub fn launches(&self) -> u32 {
        self.launches.load(Ordering::SeqCst)
    }

    pub fn events(&self) -> Vec<SimEvent> {
        self.events.lock().unwrap().clone()
    }

    /// The process `pid` of `model` ends by itself (a crash, or a kill from outside); the
    /// receiver resolves once the pool has applied the exit.
    pub fn exit(&self, model: &str, pid: u32, status: ExitStatus) -> oneshot::Receiver<()> {
        self.footprints.lock().unwrap().remove(&pid);
        self.events
            .lock()
            .unwrap()
            .push(SimEvent::Exited(model.to_owned(), pid));
        let (noted, applied) = oneshot::channel();
        if let Some(exits) = self.exits.lock().unwrap().as_ref() {
            let _ = exits.send((model.to_owned(), pid, status, noted));
        }
        applied
    }
}

impl Processes for SimProcesses {
    /// The pid again, so a test can tell which worker a lease is on.
    type Handle = u32;
    type Stopped = ();

    fn launch(
        &self,
        model: &str,
        _memory_limit: u64,
    ) -> impl Future<Output = Result<LaunchedWorker<u32>, LaunchError>> + Send {
        let model = model.to_owned();
        let delay = self.delay;
        let pid = FIRST_PID + self.launches.fetch_add(1, Ordering::SeqCst);
        let outcome = self.outcomes.lock().unwrap().pop_front();
        let estimate = self.estimate(&model);
        let this = self.clone();
        async move {
            this.events
                .lock()
                .unwrap()
                .push(SimEvent::Launched(model.clone()));
            tokio::time::sleep(delay).await;
            match outcome.unwrap_or(SimOutcome::Ready) {
                SimOutcome::Ready => {
                    this.footprints.lock().unwrap().insert(pid, estimate);
                    Ok(LaunchedWorker { pid, handle: pid })
                }
                SimOutcome::LoadFails => Err(LaunchError::LoadFailed {
                    model,
                    pid,
                    message: "simulated load failure".to_owned(),
                }),
                SimOutcome::Unservable => Err(LaunchError::Unservable {
                    reason: format!("/models/{model}: tensor model.norm.weight is missing"),
                    model,
                }),
                SimOutcome::Panics => panic!("simulated launcher panic for {model}"),
            }
        }
    }

    fn stop(
        &self,
        model: &str,
        worker: Worker<u32>,
        order: StopOrder,
    ) -> impl Future<Output = ()> + Send {
        let model = model.to_owned();
        let this = self.clone();
        async move {
            this.events
                .lock()
                .unwrap()
                .push(SimEvent::StopOrdered(model.clone(), worker.pid));
            if this.frozen.lock().unwrap().contains(&model) {
                return std::future::pending().await;
            }
            tokio::task::yield_now().await;
            let status = match order {
                StopOrder::Graceful(_) => ExitStatus::Code(0),
                StopOrder::Signal(signal) => ExitStatus::Signal(signal as i32),
            };
            let _ = this.exit(&model, worker.pid, status).await;
        }
    }

    fn footprint(&self, pid: u32) -> u64 {
        self.footprints
            .lock()
            .unwrap()
            .get(&pid)
            .copied()
            .unwrap_or(0)
    }

    fn estimate(&self, model: &str) -> u64 {
        self.estimates
            .lock()
            .unwrap()
            .get(model)
            .copied()
            .unwrap_or(0)
    }
}

/// SplitMix64: tiny, seedable and good enough to pick schedule steps.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`; `n` must not be zero.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A random element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
