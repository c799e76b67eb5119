//! Thousands of seeded random schedules of requests (acquire with admission), releases, launch
//! results, stops that take their time, crashes, reaps, memory-pressure evictions and TTL stops
//! over four models of different sizes under one memory ceiling, with the pool's invariants
//! checked after every step. The world around the pool (processes and their footprints,
//! launches in flight, the clock) is simulated here; the pool's own state machine, its admission
//! and real `Lease` guards are the code under test.
//!
//! Beyond the lease and process invariants, it checks that no worker ever starts outside
//! admission, that the live workers' footprints plus the estimates of starting ones never pass
//! the ceiling (so a model admitted after evictions starts only once enough of its victims'
//! memory is gone), that a model bigger than the ceiling never starts, and that every change of
//! the pool's state is announced on its change notification.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::admission::AcquireStep;
use super::super::lease::Lease;
use super::super::machine::{ExitOutcome, Limits, PoolState, lock};
use super::super::processes::LaunchedWorker;
use super::super::state::{EntryState, ExitInfo, ExitStatus, StopReason};
use super::sim::Rng;
use crate::memory::Budget;

/// Four models: `d` is bigger than the whole ceiling, and no three of the others fit together.
const MODELS: [(&str, u64); 4] = [("a", 300), ("b", 450), ("c", 600), ("d", 1100)];
const CEILING: u64 = 1000;
const SCHEDULES: u64 = 3_000;
const STEPS: usize = 150;

/// A simulated worker process: it exists from a successful launch until it is reaped, and holds
/// its footprint until it exits.
struct Process {
    model: &'static str,
    pid: u32,
    alive: bool,
    footprint: u64,
}

/// How often each of admission's answers came, over all schedules: the test must exercise them.
#[derive(Default)]
struct Seen {
    launches: u64,
    evictions: u64,
    refusals: u64,
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
    seen: Seen,
}

fn estimate(model: &str) -> u64 {
    MODELS
        .iter()
        .find(|(name, _)| *name == model)
        .map_or(0, |(_, bytes)| *bytes)
}

impl World {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let max_loaded_models = [None, Some(1), Some(2)][rng.below(3)];
        let limits = Limits {
            budget: Budget::new(CEILING, 0.85, 0.95),
            max_loaded_models,
        };
        Self {
            pool: Arc::new(Mutex::new(PoolState::new(limits))),
            rng,
            now: Instant::now(),
            next_pid: 1,
            leases: Vec::new(),
            launching: Vec::new(),
            processes: Vec::new(),
            reaped: Vec::new(),
            seen: Seen::default(),
        }
    }

    fn step(&mut self) {
        let model = self.rng.pick(&MODELS).0;
        match self.rng.below(13) {
            0..=2 => self.acquire(model),
            3 | 4 => self.release(),
            5 => self.answer_launch(),
            6 => self.crash(),
            7 => self.finish_stop(),
            8 => self.reap(),
            9 => self.stop(model),
            10 => self.enforce(),
            11 => self.kill(model),
            _ => self.now += Duration::from_millis(self.rng.below(3_000) as u64),
        }
    }

    fn footprint(&self, pid: u32) -> u64 {
        self.processes
            .iter()
            .find(|process| process.pid == pid && process.alive)
            .map_or(0, |process| process.footprint)
    }

    /// What the world holds now: live processes plus the estimates of starting models.
    fn held(&self, pool: &PoolState<u32>) -> u64 {
        let live: u64 = self
            .processes
            .iter()
            .filter(|process| process.alive)
            .map(|process| process.footprint)
            .sum();
        let starting: u64 = MODELS
            .iter()
            .filter_map(|(model, _)| match pool.state(model) {
                Some(EntryState::Starting { estimate, .. }) => Some(*estimate),
                _ => None,
            })
            .sum();
        live + starting
    }

    fn acquire(&mut self, model: &'static str) {
        let waited_on_start = self.rng.below(4) == 0;
        let pool = Arc::clone(&self.pool);
        let mut pool = lock(&pool);
        let held_before = self.held(&pool);
        let footprint = |pid| self.footprint(pid);
        let step = pool.acquire(
            model,
            self.now,
            estimate(model),
            &footprint,
            waited_on_start,
        );
        drop(pool);
        match step {
            AcquireStep::Leased(worker) => {
                assert!(
                    self.has_process(model, worker.pid),
                    "leased a pid with no process"
                );
                self.leases
                    .push(Lease::new(Arc::clone(&self.pool), model, worker));
            }
            AcquireStep::Launch {
                generation,
                memory_limit,
            } => {
                self.seen.launches += 1;
                assert!(
                    !self.launching.iter().any(|(m, _)| *m == model),
                    "second launch of {model} while one is in flight"
                );
                assert!(
                    held_before + estimate(model) <= CEILING,
                    "admitted {model} ({}) beside {held_before} under {CEILING}",
                    estimate(model)
                );
                assert!(memory_limit + held_before >= estimate(model));
                self.launching.push((model, generation));
            }
            AcquireStep::Evict(victims) => {
                self.seen.evictions += 1;
                for (victim, worker) in victims {
                    assert_ne!(victim, model);
                    assert_eq!(self.leases_on(worker.pid), 0, "evicted a leased worker");
                }
            }
            AcquireStep::NoRoom(_) => self.seen.refusals += 1,
            AcquireStep::Wait { .. }
            | AcquireStep::Backoff { .. }
            | AcquireStep::StartFailed { .. } => {}
        }
    }

    fn release(&mut self) {
        if !self.leases.is_empty() {
            let i = self.rng.below(self.leases.len());
            let lease = self.leases.swap_remove(i);
            if self.rng.below(2) == 0 {
                lease.complete();
            }
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
        let pid = self.next_pid;
        self.next_pid += 1;
        let mut pool = lock(&self.pool);
        match self.rng.below(4) {
            0 => {
                let exit = ExitInfo::LaunchFailed {
                    message: "simulated".to_owned(),
                };
                pool.launch_failed(model, generation, exit, self.now);
            }
            1 => {
                let outcome = pool.on_exit(model, pid, ExitStatus::Signal(9), self.now);
                assert_eq!(outcome, ExitOutcome::DuringStart);
                self.reaped.push((model, pid));
                let worker = LaunchedWorker { pid, handle: pid };
                assert!(!pool.launched(model, generation, worker, self.now));
            }
            _ => {
                let worker = LaunchedWorker { pid, handle: pid };
                assert!(pool.launched(model, generation, worker, self.now));
                let footprint =
                    estimate(model) / 2 + self.rng.below(estimate(model) as usize / 2) as u64;
                self.processes.push(Process {
                    model,
                    pid,
                    alive: true,
                    footprint,
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

    /// A worker being stopped exits (the stop protocol takes its time).
    fn finish_stop(&mut self) {
        let pool = lock(&self.pool);
        let stopping: Vec<u32> = MODELS
            .iter()
            .filter_map(|(model, _)| match pool.state(model) {
                Some(EntryState::Stopping { pid, .. }) => Some(*pid),
                _ => None,
            })
            .collect();
        drop(pool);
        if let Some(&pid) = stopping.get(self.rng.below(stopping.len().max(1))) {
            self.exit(pid);
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
        let status = *self.rng.pick(&[ExitStatus::Code(0), ExitStatus::Signal(9)]);
        let outcome = lock(&self.pool).on_exit(process.model, process.pid, status, self.now);
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
        }
    }

    /// An operator's kill: the worker goes, leased or not.
    fn kill(&mut self, model: &'static str) {
        let killed = lock(&self.pool).begin_kill(model, self.now);
        if let Some(worker) = killed {
            self.exit(worker.pid);
        }
    }

    /// The enforcer's pass: idle workers least recently used first over the soft watermark.
    fn enforce(&mut self) {
        let pool = Arc::clone(&self.pool);
        let mut pool = lock(&pool);
        let usage = pool.usage(&|pid| self.footprint(pid));
        let used = usage.iter().map(|worker| worker.bytes).sum();
        let plan = pool
            .limits
            .budget
            .plan_pressure(used, &pool.idle_lru(&usage));
        for model in plan.stop {
            let worker = pool.begin_stop(&model, StopReason::Evicted, self.now);
            let worker = worker.expect("a planned victim must be stoppable");
            assert_eq!(self.leases_on(worker.pid), 0);
        }
    }

    fn exit(&mut self, pid: u32) {
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
        let held = self.held(&pool);
        assert!(
            held <= CEILING,
            "workers hold {held} over the {CEILING} ceiling"
        );
        for (model, _) in MODELS {
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
                        "{model} starts without exactly its admitted launch"
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
fn random_schedules_keep_the_pool_invariants_and_the_memory_ceiling() {
    let mut seen = Seen::default();
    for seed in 0..SCHEDULES {
        let run = std::panic::catch_unwind(|| {
            let mut world = World::new(seed);
            for _ in 0..STEPS {
                let before = lock(&world.pool).snapshot();
                let version = lock(&world.pool).version();
                world.step();
                let after = lock(&world.pool).snapshot();
                if after != before {
                    assert_ne!(
                        lock(&world.pool).version(),
                        version,
                        "an unannounced change"
                    );
                }
                world.check_invariants();
            }
            world.leases.clear();
            for entry in lock(&world.pool).snapshot() {
                assert_eq!(entry.leases, 0, "{} kept a lease", entry.model);
            }
            world.seen
        });
        let Ok(run) = run else {
            panic!("schedule with seed {seed} broke an invariant (message above)");
        };
        seen.launches += run.launches;
        seen.evictions += run.evictions;
        seen.refusals += run.refusals;
    }
    assert!(seen.launches > 1_000 && seen.evictions > 100 && seen.refusals > 100);
}
