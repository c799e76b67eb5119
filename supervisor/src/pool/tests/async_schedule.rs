//! Seeded random interleavings of the async API itself: request tasks acquiring (through
//! admission, under a ceiling that fits two of the three models), holding and dropping leases
//! while a chaos task stops and crashes workers, on a single-threaded runtime where every await
//! point is a possible switch. Processes that track what lives check that no model ever has two
//! and that the live ones never pass the ceiling; the tasks must all finish (no waiter is
//! stranded) and every lease count must come back to zero.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::super::{
    ExitStatus, LaunchError, LaunchedWorker, Limits, Phase, Pool, Processes, StopOrder, StopReason,
    Worker,
};
use super::sim::Rng;
use crate::memory::Budget;

/// Each model's estimate and footprint; two fit under the ceiling, three do not.
const MODEL_BYTES: u64 = 400;
const CEILING: u64 = 1000;

const MODELS: [&str; 3] = ["a", "b", "c"];
const SCHEDULES: u64 = 300;
const REQUEST_TASKS: usize = 12;

#[derive(Default)]
struct World {
    /// Unreaped processes per model.
    live: HashMap<String, u32>,
    /// Pids that have exited.
    gone: std::collections::HashSet<u32>,
    /// Leases the request tasks hold, per pid.
    held: HashMap<u32, u32>,
    next_pid: u32,
    /// Broken invariants seen inside launch tasks, whose panics nobody would see.
    violations: Vec<String>,
}

/// Where a reaped process's model and pid go.
type ExitSender = tokio::sync::mpsc::UnboundedSender<(String, u32)>;

#[derive(Clone)]
struct TrackingProcesses {
    world: Arc<Mutex<World>>,
    seed: u64,
    /// Where exits go, as the reaper's do; set once the pool exists.
    exits: Arc<Mutex<Option<ExitSender>>>,
}

async fn yields(n: usize) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

impl Processes for TrackingProcesses {
    type Handle = u32;
    type Stopped = ();

    fn launch(
        &self,
        model: &str,
        _memory_limit: u64,
    ) -> impl Future<Output = Result<LaunchedWorker<u32>, LaunchError>> + Send {
        let model = model.to_owned();
        let world = Arc::clone(&self.world);
        let pid = {
            let mut world = world.lock().unwrap();
            let live = world.live.entry(model.clone()).or_default();
            *live += 1;
            if *live > 1 {
                let violation = format!("{live} processes of {model}");
                world.violations.push(violation);
            }
            let total: u32 = world.live.values().sum();
            if u64::from(total) * MODEL_BYTES > CEILING {
                let violation = format!("{total} live processes over the ceiling");
                world.violations.push(violation);
            }
            world.next_pid += 1;
            world.next_pid
        };
        let mut rng = Rng::new(self.seed ^ u64::from(pid));
        async move {
            yields(rng.below(5)).await;
            if rng.below(30) > 0 {
                return Ok(LaunchedWorker { pid, handle: pid });
            }
            // A failed launch reaps its own process before it answers.
            *world.lock().unwrap().live.get_mut(&model).unwrap() -= 1;
            Err(LaunchError::LoadFailed {
                model,
                pid,
                message: "simulated".to_owned(),
            })
        }
    }

    fn stop(
        &self,
        model: &str,
        worker: Worker<u32>,
        _order: StopOrder,
    ) -> impl Future<Output = ()> + Send {
        let model = model.to_owned();
        let this = self.clone();
        let mut rng = Rng::new(self.seed ^ u64::from(worker.pid) << 1);
        async move {
            {
                let mut world = this.world.lock().unwrap();
                if world.held.get(&worker.pid).copied().unwrap_or(0) > 0 {
                    let violation = format!("stopped the leased worker {} of {model}", worker.pid);
                    world.violations.push(violation);
                }
            }
            yields(rng.below(4)).await;
            this.reap(&model, worker.pid);
        }
    }

    fn footprint(&self, _pid: u32) -> u64 {
        MODEL_BYTES
    }

    fn estimate(&self, _model: &str) -> u64 {
        MODEL_BYTES
    }
}

impl TrackingProcesses {
    /// The reaper's part: the process is gone, then the pool hears of it.
    fn reap(&self, model: &str, pid: u32) {
        {
            let mut world = self.world.lock().unwrap();
            // A stop of a worker that already died finds it gone, as the real reaper would.
            if !world.gone.insert(pid) {
                return;
            }
            *world.live.get_mut(model).unwrap() -= 1;
        }
        if let Some(exits) = self.exits.lock().unwrap().as_ref() {
            let _ = exits.send((model.to_owned(), pid));
        }
    }
}

async fn request_task(pool: Pool<TrackingProcesses>, world: Arc<Mutex<World>>, seed: u64) {
    let mut rng = Rng::new(seed);
    for _ in 0..8 {
        let model = *rng.pick(&MODELS);
        let wait = Duration::from_millis(rng.below(2) as u64 * 50);
        if let Ok(lease) = pool.acquire(model, wait).await {
            *world.lock().unwrap().held.entry(lease.pid()).or_default() += 1;
            yields(rng.below(4)).await;
            *world.lock().unwrap().held.get_mut(&lease.pid()).unwrap() -= 1;
            drop(lease);
        }
        yields(rng.below(3)).await;
    }
}

async fn chaos_task(pool: Pool<TrackingProcesses>, seed: u64) {
    let mut rng = Rng::new(seed);
    for _ in 0..20 {
        yields(rng.below(4)).await;
        let model = *rng.pick(&MODELS);
        if rng.below(3) == 0 {
            let ready = pool.snapshot().into_iter().find(|e| e.model == model);
            if let Some(entry) = ready.filter(|e| e.phase == Phase::Ready) {
                pool.processes().reap(model, entry.pid.unwrap());
            }
            continue;
        }
        let reasons = [StopReason::Evicted, StopReason::Idle, StopReason::Unload];
        pool.stop(model, *rng.pick(&reasons)).await;
    }
}

fn run_schedule(seed: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let world = Arc::new(Mutex::new(World::default()));
    let processes = TrackingProcesses {
        world: Arc::clone(&world),
        seed,
        exits: Arc::default(),
    };
    let limits = Limits {
        budget: Budget::new(CEILING, 0.85, 0.95),
        max_loaded_models: None,
    };
    let pool = Pool::new(processes.clone(), limits);
    runtime.block_on(async {
        let (exits, mut incoming) = tokio::sync::mpsc::unbounded_channel::<(String, u32)>();
        *processes.exits.lock().unwrap() = Some(exits);
        let follower = pool.clone();
        tokio::spawn(async move {
            while let Some((model, pid)) = incoming.recv().await {
                follower.on_exit(&model, pid, ExitStatus::Signal(15));
            }
        });
        let mut tasks = Vec::new();
        for i in 0..REQUEST_TASKS as u64 {
            let task = request_task(pool.clone(), Arc::clone(&world), seed * 100 + i);
            tasks.push(tokio::spawn(task));
        }
        tasks.push(tokio::spawn(chaos_task(pool.clone(), !seed)));
        let all = async {
            for task in tasks {
                task.await.unwrap();
            }
        };
        // A schedule takes milliseconds; this only tells a hang from a busy machine.
        let finished = tokio::time::timeout(Duration::from_secs(300), all).await;
        assert!(finished.is_ok(), "seed {seed}: a task never finished");
    });
    for entry in pool.snapshot() {
        assert_eq!(entry.leases, 0, "seed {seed}: {} kept a lease", entry.model);
    }
    let violations = &world.lock().unwrap().violations;
    assert!(violations.is_empty(), "seed {seed}: {violations:?}");
}

#[test]
fn random_async_interleavings_never_run_two_workers_or_strand_a_request() {
    for seed in 0..SCHEDULES {
        run_schedule(seed);
    }
}
