//! Seeded random interleavings of the async API itself: request tasks acquiring, holding and
//! dropping leases while a chaos task stops and crashes workers, on a single-threaded runtime
//! where every await point is a possible switch. A launcher that tracks live processes checks
//! that no model ever has two; the tasks must all finish (no waiter is stranded) and every
//! lease count must come back to zero.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::sim::Rng;
use super::{ExitStatus, LaunchError, LaunchedWorker, Launcher, Phase, Pool, StopReason};

const MODELS: [&str; 3] = ["a", "b", "c"];
const SCHEDULES: u64 = 300;
const REQUEST_TASKS: usize = 12;

#[derive(Default)]
struct World {
    /// Unreaped processes per model.
    live: HashMap<String, u32>,
    /// Leases the request tasks hold, per pid.
    held: HashMap<u32, u32>,
    next_pid: u32,
    /// Broken invariants seen inside launch tasks, whose panics nobody would see.
    violations: Vec<String>,
}

#[derive(Clone)]
struct TrackingLauncher {
    world: Arc<Mutex<World>>,
    seed: u64,
}

async fn yields(n: usize) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

impl Launcher for TrackingLauncher {
    type Handle = u32;

    fn launch(
        &self,
        model: &str,
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
}

/// The reaper's part: the process is gone, then the pool hears of it.
fn reap(pool: &Pool<TrackingLauncher>, world: &Mutex<World>, model: &str, pid: u32) {
    *world.lock().unwrap().live.get_mut(model).unwrap() -= 1;
    pool.on_exit(model, pid, ExitStatus::Signal(15));
}

async fn request_task(pool: Pool<TrackingLauncher>, world: Arc<Mutex<World>>, seed: u64) {
    let mut rng = Rng::new(seed);
    for _ in 0..8 {
        let model = *rng.pick(&MODELS);
        if let Ok(lease) = pool.acquire(model).await {
            *world.lock().unwrap().held.entry(lease.pid()).or_default() += 1;
            yields(rng.below(4)).await;
            *world.lock().unwrap().held.get_mut(&lease.pid()).unwrap() -= 1;
            drop(lease);
        }
        yields(rng.below(3)).await;
    }
}

async fn chaos_task(pool: Pool<TrackingLauncher>, world: Arc<Mutex<World>>, seed: u64) {
    let mut rng = Rng::new(seed);
    for _ in 0..20 {
        yields(rng.below(4)).await;
        let model = *rng.pick(&MODELS);
        if rng.below(3) == 0 {
            let ready = pool.snapshot().into_iter().find(|e| e.model == model);
            if let Some(entry) = ready.filter(|e| e.phase == Phase::Ready) {
                reap(&pool, &world, model, entry.pid.unwrap());
            }
            continue;
        }
        let reasons = [StopReason::Evicted, StopReason::Idle, StopReason::Unload];
        if let Some(worker) = pool.begin_stop(model, *rng.pick(&reasons)) {
            let held = world.lock().unwrap().held.get(&worker.pid).copied();
            assert_eq!(held.unwrap_or(0), 0, "stopped a leased worker of {model}");
            yields(rng.below(4)).await;
            reap(&pool, &world, model, worker.pid);
        }
    }
}

fn run_schedule(seed: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let world = Arc::new(Mutex::new(World::default()));
    let pool = Pool::new(TrackingLauncher {
        world: Arc::clone(&world),
        seed,
    });
    runtime.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..REQUEST_TASKS as u64 {
            let task = request_task(pool.clone(), Arc::clone(&world), seed * 100 + i);
            tasks.push(tokio::spawn(task));
        }
        tasks.push(tokio::spawn(chaos_task(
            pool.clone(),
            Arc::clone(&world),
            !seed,
        )));
        let all = async {
            for task in tasks {
                task.await.unwrap();
            }
        };
        let finished = tokio::time::timeout(Duration::from_secs(10), all).await;
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
