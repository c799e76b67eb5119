//! Thousands of seeded random schedules of acquire, release, launch results, crashes, reaps,
//! evictions and TTL stops over three models, with the pool's invariants checked after every
//! step. The world around the pool (processes, launches in flight, the clock) is simulated here;
//! the pool's own state machine and real `Lease` guards are the code under test.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::launcher::LaunchedWorker;
use super::lease::Lease;
use super::machine::{AcquireStep, ExitOutcome, PoolState, lock};
use super::sim::Rng;
use super::state::{EntryState, ExitStatus, StopReason};

const MODELS: [&str; 3] = ["a", "b", "c"];
const SCHEDULES: u64 = 3_000;
const STEPS: usize = 150;

/// A simulated worker process: it exists from a successful launch until it is reaped.
struct Process {
    model: &'static str,
    pid: u32,
    alive: bool,
}

struct World {
    pool: Arc<Mutex<PoolState<u32>>>,
    rng: Rng,
    now: Instant,
    next_pid: u32,
    leases: Vec<Lease<u32>>,
    /// Launches the pool asked for and that have not answered yet.
    launching: Vec<(&'static str, u64)>,
    processes: Vec<Process>,
    /// Pids already reaped, for stale exit reports.
    reaped: Vec<(&'static str, u32)>,
}

impl World {
    fn new(seed: u64) -> Self {
        Self {
            pool: Arc::new(Mutex::new(PoolState::new())),
            rng: Rng::new(seed),
            now: Instant::now(),
            next_pid: 1,
            leases: Vec::new(),
            launching: Vec::new(),
            processes: Vec::new(),
            reaped: Vec::new(),
        }
    }

    fn step(&mut self) {
        let model = *self.rng.pick(&MODELS);
        match self.rng.below(10) {
            0 | 1 => self.acquire(model),
            2 | 3 => self.release(),
            4 => self.answer_launch(),
            5 => self.crash(),
            6 => self.reap(),
            7 => self.stop(model),
            8 => self.evict_lru(),
            _ => self.now += Duration::from_millis(self.rng.below(40_000) as u64),
        }
    }

    fn acquire(&mut self, model: &'static str) {
        let step = lock(&self.pool).acquire(model, self.now);
        match step {
            AcquireStep::Leased(worker) => {
                assert!(
                    self.has_process(model, worker.pid),
                    "leased a pid with no process"
                );
                self.leases
                    .push(Lease::new(Arc::clone(&self.pool), model, worker));
            }
            AcquireStep::Launch { generation, .. } => {
                assert!(
                    !self.launching.iter().any(|(m, _)| *m == model),
                    "second launch of {model} while one is in flight"
                );
                self.launching.push((model, generation));
            }
            AcquireStep::Wait(_) | AcquireStep::CrashLooping { .. } => {}
        }
    }

    fn release(&mut self) {
        if !self.leases.is_empty() {
            let i = self.rng.below(self.leases.len());
            self.leases.swap_remove(i);
        }
    }

    /// Answers one launch in flight: ready, failed, or ready but already dead (the reaper's
    /// report racing the launch's answer).
    fn answer_launch(&mut self) {
        if self.launching.is_empty() {
            return;
        }
        let (model, generation) = self
            .launching
            .swap_remove(self.rng.below(self.launching.len()));
        let mut pool = lock(&self.pool);
        match self.rng.below(4) {
            0 => pool.launch_failed(model, generation, "simulated".to_owned(), self.now),
            1 => {
                let pid = self.next_pid;
                self.next_pid += 1;
                let outcome = pool.on_exit(model, pid, ExitStatus::Signal(9), self.now);
                assert_eq!(outcome, ExitOutcome::DuringStart);
                self.reaped.push((model, pid));
                let worker = LaunchedWorker { pid, handle: pid };
                assert!(!pool.launched(model, generation, worker, self.now));
            }
            _ => {
                let pid = self.next_pid;
                self.next_pid += 1;
                let worker = LaunchedWorker { pid, handle: pid };
                assert!(pool.launched(model, generation, worker, self.now));
                self.processes.push(Process {
                    model,
                    pid,
                    alive: true,
                });
            }
        }
    }

    fn crash(&mut self) {
        let alive: Vec<usize> = (0..self.processes.len())
            .filter(|&i| self.processes[i].alive)
            .collect();
        if !alive.is_empty() {
            self.processes[*self.rng.pick(&alive)].alive = false;
        }
    }

    /// Delivers the exit of a dead process, or now and then a stale repeat of an old one.
    fn reap(&mut self) {
        if !self.reaped.is_empty() && self.rng.below(4) == 0 {
            let (model, pid) = *self.rng.pick(&self.reaped);
            let outcome = lock(&self.pool).on_exit(model, pid, ExitStatus::Code(1), self.now);
            assert!(matches!(
                outcome,
                ExitOutcome::Stale | ExitOutcome::DuringStart
            ));
            return;
        }
        let Some(i) = self.processes.iter().position(|p| !p.alive) else {
            return;
        };
        let process = self.processes.swap_remove(i);
        let outcome =
            lock(&self.pool).on_exit(process.model, process.pid, ExitStatus::Code(0), self.now);
        assert_ne!(
            outcome,
            ExitOutcome::Stale,
            "the exit of a current worker was ignored"
        );
        self.reaped.push((process.model, process.pid));
    }

    /// A stop for any reason, leased or not: the pool must refuse a leased worker.
    fn stop(&mut self, model: &'static str) {
        let reasons = [StopReason::Idle, StopReason::Unload, StopReason::Shutdown];
        let reason = *self.rng.pick(&reasons);
        let leased_pid = self
            .current_pid(model)
            .filter(|&pid| self.leases_on(pid) > 0);
        let stopped = lock(&self.pool).begin_stop(model, reason, self.now);
        if let Some(worker) = stopped {
            assert_ne!(Some(worker.pid), leased_pid, "stopped a leased worker");
            self.exit_gracefully(worker.pid);
        }
    }

    fn evict_lru(&mut self) {
        let candidates = lock(&self.pool).idle_candidates();
        let Some(oldest) = candidates.first() else {
            return;
        };
        assert!(
            candidates
                .windows(2)
                .all(|w| w[0].last_used <= w[1].last_used)
        );
        assert_eq!(self.leases_on(oldest.pid), 0);
        let worker = lock(&self.pool).begin_stop(&oldest.model, StopReason::Evicted, self.now);
        let worker = worker.expect("an idle candidate must be stoppable");
        self.exit_gracefully(worker.pid);
    }

    fn exit_gracefully(&mut self, pid: u32) {
        if let Some(process) = self.processes.iter_mut().find(|p| p.pid == pid) {
            process.alive = false;
        }
    }

    fn has_process(&self, model: &str, pid: u32) -> bool {
        self.processes
            .iter()
            .any(|p| p.model == model && p.pid == pid)
    }

    fn leases_on(&self, pid: u32) -> u32 {
        self.leases
            .iter()
            .filter(|lease| lease.pid() == pid)
            .count() as u32
    }

    fn current_pid(&self, model: &str) -> Option<u32> {
        lock(&self.pool).state(model).and_then(EntryState::pid)
    }

    fn check_invariants(&self) {
        let pool = lock(&self.pool);
        for model in MODELS {
            let processes = self.processes.iter().filter(|p| p.model == model).count();
            assert!(processes <= 1, "{model} has {processes} unreaped processes");
            let launching = self.launching.iter().filter(|(m, _)| *m == model).count();
            match pool.state(model) {
                Some(EntryState::Ready { worker, leases, .. }) => {
                    assert!(self.has_process(model, worker.pid));
                    let held = self
                        .leases
                        .iter()
                        .filter(|l| l.model() == model && l.generation() == worker.generation)
                        .count() as u32;
                    assert_eq!(*leases, held, "{model}'s lease count is off");
                    assert_eq!(launching, 0);
                }
                Some(EntryState::Stopping { pid, .. }) => {
                    assert!(self.has_process(model, *pid));
                    assert_eq!(self.leases_on(*pid), 0, "a stopping worker has leases");
                    assert_eq!(launching, 0);
                }
                Some(EntryState::Starting { generation, .. }) => {
                    let expected = [(model, *generation)];
                    let launches: Vec<_> = self
                        .launching
                        .iter()
                        .filter(|(m, _)| *m == model)
                        .copied()
                        .collect();
                    assert_eq!(
                        launches, expected,
                        "{model} starts without exactly its launch"
                    );
                    assert_eq!(processes, 0);
                }
                None | Some(EntryState::NotRunning | EntryState::Failed { .. }) => {
                    assert_eq!(processes, 0, "{model} is down but its process is unreaped");
                    assert_eq!(launching, 0);
                }
            }
        }
    }
}

#[test]
fn random_schedules_keep_the_pool_invariants() {
    for seed in 0..SCHEDULES {
        let run = std::panic::catch_unwind(|| {
            let mut world = World::new(seed);
            for _ in 0..STEPS {
                world.step();
                world.check_invariants();
            }
            world.leases.clear();
            for entry in lock(&world.pool).snapshot() {
                assert_eq!(entry.leases, 0, "{} kept a lease", entry.model);
            }
        });
        assert!(
            run.is_ok(),
            "schedule with seed {seed} broke an invariant (message above)"
        );
    }
}
