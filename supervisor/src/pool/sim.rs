//! Test doubles: a simulated launcher whose starts take a set time and succeed, fail or panic
//! as the test queues them, and a small seeded RNG for the schedule tests.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::launcher::{LaunchError, LaunchedWorker, Launcher};

/// What the next launch does; `Ready` once the queue is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimOutcome {
    Ready,
    LoadFails,
    Panics,
}

/// Clones share their counters, so a test keeps one while the pool owns the other.
#[derive(Clone, Default)]
pub struct SimLauncher {
    delay: Duration,
    launches: Arc<AtomicU32>,
    outcomes: Arc<Mutex<VecDeque<SimOutcome>>>,
}

/// Simulated pids start here, far from real ones, and are never reused.
const FIRST_PID: u32 = 10_000;

impl SimLauncher {
    pub fn with_delay(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::default()
        }
    }

    pub fn then(&self, outcome: SimOutcome) -> &Self {
        self.outcomes.lock().unwrap().push_back(outcome);
        self
    }

    pub fn launches(&self) -> u32 {
        self.launches.load(Ordering::SeqCst)
    }
}

impl Launcher for SimLauncher {
    /// The pid again, so a test can tell which worker a lease is on.
    type Handle = u32;

    fn launch(
        &self,
        model: &str,
    ) -> impl Future<Output = Result<LaunchedWorker<u32>, LaunchError>> + Send {
        let model = model.to_owned();
        let delay = self.delay;
        let pid = FIRST_PID + self.launches.fetch_add(1, Ordering::SeqCst);
        let outcome = self.outcomes.lock().unwrap().pop_front();
        async move {
            tokio::time::sleep(delay).await;
            match outcome.unwrap_or(SimOutcome::Ready) {
                SimOutcome::Ready => Ok(LaunchedWorker { pid, handle: pid }),
                SimOutcome::LoadFails => Err(LaunchError::LoadFailed {
                    model,
                    pid,
                    message: "simulated load failure".to_owned(),
                }),
                SimOutcome::Panics => panic!("simulated launcher panic for {model}"),
            }
        }
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
