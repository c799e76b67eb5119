//! Each transition of `PoolState` on its own, with a clock the test moves by hand.

use std::time::{Duration, Instant};

use super::super::admission::AcquireStep;
use super::super::machine::{ExitOutcome, PoolState};
use super::super::processes::LaunchedWorker;
use super::super::state::{EntryState, ExitInfo, ExitStatus, Phase, StopReason, Worker};
use super::sim::roomy;

const KILLED: ExitStatus = ExitStatus::Signal(9);
const CRASHED: ExitStatus = ExitStatus::Signal(11);

fn new_state() -> PoolState<u32> {
    PoolState::new(roomy())
}

/// `acquire` for a request that has not waited on a start, with no memory figures.
fn acquire(state: &mut PoolState<u32>, model: &str, now: Instant) -> AcquireStep<u32> {
    state.acquire(model, now, 0, &|_| 0, false)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Starts `model` and completes its launch as `pid`.
fn start_ready(state: &mut PoolState<u32>, model: &str, pid: u32, now: Instant) -> u64 {
    let AcquireStep::Launch { generation, .. } = acquire(state, model, now) else {
        panic!("{model} should start");
    };
    assert!(state.launched(model, generation, LaunchedWorker { pid, handle: pid }, now));
    generation
}

fn lease(state: &mut PoolState<u32>, model: &str, now: Instant) -> Worker<u32> {
    match acquire(state, model, now) {
        AcquireStep::Leased(worker) => worker,
        other => panic!("expected a lease on {model}, got {other:?}"),
    }
}

fn phase(state: &PoolState<u32>, model: &str) -> Phase {
    state
        .state(model)
        .map_or(Phase::NotRunning, EntryState::phase)
}

fn leases(state: &PoolState<u32>, model: &str) -> u32 {
    match state.state(model) {
        Some(EntryState::Ready { leases, .. }) => *leases,
        _ => 0,
    }
}

#[test]
fn first_acquire_starts_and_later_ones_wait_on_the_same_start() {
    let mut state = new_state();
    let now = Instant::now();
    let AcquireStep::Launch { generation, .. } = acquire(&mut state, "m", now) else {
        panic!("NotRunning should start");
    };
    assert_eq!(phase(&state, "m"), Phase::Starting);
    let AcquireStep::Wait { starting: true } = acquire(&mut state, "m", now) else {
        panic!("Starting should wait");
    };
    let waiter = state.subscribe();
    assert!(state.launched("m", generation, LaunchedWorker { pid: 7, handle: 7 }, now));
    assert_eq!(phase(&state, "m"), Phase::Ready);
    assert!(waiter.has_changed().unwrap());
}

#[test]
fn a_lease_is_counted_on_ready_and_given_back_on_release() {
    let mut state = new_state();
    let t0 = Instant::now();
    let generation = start_ready(&mut state, "m", 7, t0);
    let worker = lease(&mut state, "m", t0 + secs(1));
    assert_eq!((worker.pid, worker.generation), (7, generation));
    lease(&mut state, "m", t0 + secs(2));
    assert_eq!(leases(&state, "m"), 2);
    state.release("m", generation, false, t0 + secs(3));
    state.release("m", generation, false, t0 + secs(4));
    assert_eq!(leases(&state, "m"), 0);
    assert_eq!(state.idle_candidates()[0].last_used, t0 + secs(4));
}

#[test]
fn begin_stop_refuses_a_leased_worker() {
    let mut state = new_state();
    let now = Instant::now();
    let generation = start_ready(&mut state, "m", 7, now);
    lease(&mut state, "m", now);
    for reason in [
        StopReason::Evicted,
        StopReason::Shutdown,
        StopReason::Killed,
    ] {
        assert!(state.begin_stop("m", reason, now).is_none());
    }
    assert_eq!(phase(&state, "m"), Phase::Ready);
    state.release("m", generation, false, now);
    assert!(state.begin_stop("m", StopReason::Evicted, now).is_some());
}

#[test]
fn a_stopped_worker_is_not_running_once_reaped_and_requests_wait_until_then() {
    let mut state = new_state();
    let now = Instant::now();
    start_ready(&mut state, "m", 7, now);
    let worker = state.begin_stop("m", StopReason::Idle, now).unwrap();
    assert_eq!(worker.pid, 7);
    assert_eq!(phase(&state, "m"), Phase::Stopping(StopReason::Idle));
    assert!(state.begin_stop("m", StopReason::Idle, now).is_none());
    let AcquireStep::Wait { starting: false } = acquire(&mut state, "m", now) else {
        panic!("Stopping should wait");
    };
    let waiter = state.subscribe();
    assert_eq!(
        state.on_exit("m", 7, ExitStatus::Code(0), now),
        ExitOutcome::Stopped
    );
    assert_eq!(phase(&state, "m"), Phase::NotRunning);
    assert!(waiter.has_changed().unwrap());
    assert!(matches!(
        acquire(&mut state, "m", now),
        AcquireStep::Launch { .. }
    ));
}

#[test]
fn pinned_workers_are_never_evicted_or_idled_but_can_be_unloaded() {
    let mut state = new_state();
    let now = Instant::now();
    state.set_pinned("m", true);
    start_ready(&mut state, "m", 7, now);
    assert!(state.idle_candidates().is_empty());
    assert!(state.begin_stop("m", StopReason::Evicted, now).is_none());
    assert!(state.begin_stop("m", StopReason::Idle, now).is_none());
    assert!(state.begin_stop("m", StopReason::Unload, now).is_some());
}

#[test]
fn failed_starts_restart_at_once_twice_then_back_off_exponentially() {
    let mut state = new_state();
    let mut now = Instant::now();
    for (streak, wait) in [(1, 0), (2, 0), (3, 1), (4, 2), (5, 4)] {
        let AcquireStep::Launch { generation, .. } = acquire(&mut state, "m", now) else {
            panic!("failure {streak} should start");
        };
        state.launch_failed("m", generation, boom(), now);
        let StartFailedOrBackoff { exit, retry_at } =
            start_failed(state.acquire("m", now, 0, &|_| 0, true));
        assert_eq!(retry_at, now + secs(wait));
        assert_eq!(exit, boom());
        if wait > 0 {
            let AcquireStep::Backoff { streak: seen, .. } =
                acquire(&mut state, "m", now + secs(wait) - Duration::from_millis(1))
            else {
                panic!("failure {streak} should be in backoff");
            };
            assert_eq!(seen, streak);
        }
        now += secs(wait);
    }
    assert_eq!(state.snapshot()[0].restarts, 5);
    let generation = start_ready(&mut state, "m", 7, now);
    // The streak survives a start: a crash before any finished request backs off 8 s.
    let outcome = state.on_exit("m", 7, CRASHED, now + secs(1));
    assert_eq!(
        outcome,
        ExitOutcome::Crashed {
            backoff: Some(secs(8))
        }
    );
    assert_eq!(generation, 6);
}

fn boom() -> ExitInfo {
    ExitInfo::LaunchFailed {
        message: "boom".to_owned(),
    }
}

#[test]
fn a_model_that_can_never_start_fails_its_waiters_at_once_and_adds_nothing_to_the_streak() {
    let mut state = new_state();
    let now = Instant::now();
    for _ in 0..2 {
        let AcquireStep::Launch { generation, .. } = acquire(&mut state, "m", now) else {
            panic!("should start");
        };
        state.launch_failed("m", generation, boom(), now);
    }
    let AcquireStep::Launch { generation, .. } = acquire(&mut state, "m", now) else {
        panic!("should start");
    };
    let unservable = ExitInfo::Unservable {
        reason: "/m: tensor model.norm.weight is missing".to_owned(),
    };
    state.launch_failed("m", generation, unservable.clone(), now);
    let StartFailedOrBackoff { exit, retry_at } =
        start_failed(state.acquire("m", now, 0, &|_| 0, true));
    assert_eq!((exit, retry_at), (unservable, now));
    // Two failures in a row, as before: the third, if it comes, starts no backoff yet.
    assert_eq!(state.entries["m"].streak, 2);
    assert_eq!(state.snapshot()[0].restarts, 3);
    assert!(matches!(
        acquire(&mut state, "m", now),
        AcquireStep::Launch { .. }
    ));
}

struct StartFailedOrBackoff {
    exit: ExitInfo,
    retry_at: Instant,
}

fn start_failed(step: AcquireStep<u32>) -> StartFailedOrBackoff {
    match step {
        AcquireStep::StartFailed { exit, retry_at } => StartFailedOrBackoff { exit, retry_at },
        other => panic!("expected the failed start, got {other:?}"),
    }
}

#[test]
fn a_ready_worker_killed_by_sigkill_restarts_at_once_whatever_the_streak() {
    let mut state = new_state();
    let now = Instant::now();
    for _ in 0..3 {
        let AcquireStep::Launch { generation, .. } = acquire(&mut state, "m", now) else {
            panic!("should start");
        };
        state.launch_failed("m", generation, boom(), now);
    }
    let later = now + secs(60);
    start_ready(&mut state, "m", 7, later);
    assert_eq!(
        state.on_exit("m", 7, KILLED, later),
        ExitOutcome::Crashed { backoff: None }
    );
    assert!(matches!(
        acquire(&mut state, "m", later),
        AcquireStep::Launch { .. }
    ));
}

#[test]
fn a_crash_after_a_finished_request_restarts_at_once() {
    let mut state = new_state();
    let now = Instant::now();
    for pid in 1..=5 {
        let generation = start_ready(&mut state, "m", pid, now);
        lease(&mut state, "m", now);
        state.release("m", generation, true, now);
        assert_eq!(
            state.on_exit("m", pid, CRASHED, now),
            ExitOutcome::Crashed { backoff: None }
        );
    }
}

#[test]
fn every_transition_bumps_the_pool_version() {
    let mut state = new_state();
    let now = Instant::now();
    let mut last = state.version();
    let mut bumped = |state: &PoolState<u32>| {
        let version = state.version();
        assert!(version > last, "a transition did not announce itself");
        last = version;
    };
    let generation = start_ready(&mut state, "m", 7, now);
    bumped(&state);
    lease(&mut state, "m", now);
    bumped(&state);
    state.release("m", generation, false, now);
    bumped(&state);
    state.begin_stop("m", StopReason::Idle, now).unwrap();
    bumped(&state);
    state.on_exit("m", 7, ExitStatus::Code(0), now);
    bumped(&state);
    state.set_pinned("m", true);
    bumped(&state);
}

#[test]
fn an_exit_awaited_by_the_pool_is_stopped_and_a_crash_names_its_signal_or_code() {
    let crashed = ExitOutcome::Crashed { backoff: None };
    assert_eq!(
        ExitOutcome::Stopped.cause(ExitStatus::Signal(15)),
        "stopped"
    );
    assert_eq!(crashed.cause(KILLED), "signal_9");
    assert_eq!(
        ExitOutcome::DuringStart.cause(ExitStatus::Code(3)),
        "exit_code_3"
    );
}

#[test]
fn a_worker_reported_dead_before_its_launch_returned_is_never_ready() {
    let mut state = new_state();
    let now = Instant::now();
    let AcquireStep::Launch { generation, .. } = acquire(&mut state, "m", now) else {
        panic!("should start");
    };
    assert_eq!(state.on_exit("m", 7, KILLED, now), ExitOutcome::DuringStart);
    assert!(!state.launched("m", generation, LaunchedWorker { pid: 7, handle: 7 }, now));
    assert_eq!(phase(&state, "m"), Phase::Failed);
}

#[test]
fn an_exit_of_another_pid_during_start_does_not_stop_the_start() {
    let mut state = new_state();
    let now = Instant::now();
    let AcquireStep::Launch { generation, .. } = acquire(&mut state, "m", now) else {
        panic!("should start");
    };
    state.on_exit("m", 6, KILLED, now);
    assert!(state.launched("m", generation, LaunchedWorker { pid: 7, handle: 7 }, now));
}

#[test]
fn a_lease_of_a_dead_worker_does_not_change_its_successor() {
    let mut state = new_state();
    let now = Instant::now();
    let old = start_ready(&mut state, "m", 7, now);
    lease(&mut state, "m", now);
    let later = now + secs(1);
    state.on_exit("m", 7, KILLED, later);
    let new = start_ready(&mut state, "m", 8, later);
    lease(&mut state, "m", later);
    state.release("m", old, false, later);
    assert_eq!(leases(&state, "m"), 1);
    state.release("m", new, false, later);
    assert_eq!(leases(&state, "m"), 0);
}

#[test]
fn exits_of_unknown_or_past_workers_are_ignored() {
    let mut state = new_state();
    let now = Instant::now();
    assert_eq!(state.on_exit("nobody", 1, KILLED, now), ExitOutcome::Stale);
    start_ready(&mut state, "m", 7, now);
    assert_eq!(state.on_exit("m", 6, KILLED, now), ExitOutcome::Stale);
    assert_eq!(phase(&state, "m"), Phase::Ready);
}

#[test]
fn idle_candidates_are_unleased_unpinned_and_least_recently_used_first() {
    let mut state = new_state();
    let t0 = Instant::now();
    for (i, model) in ["a", "b", "c", "d"].into_iter().enumerate() {
        start_ready(&mut state, model, i as u32 + 1, t0);
    }
    let b = lease(&mut state, "b", t0 + secs(5)).generation;
    state.release("b", b, false, t0 + secs(5));
    lease(&mut state, "c", t0 + secs(1));
    state.set_pinned("d", true);
    let order: Vec<String> = state
        .idle_candidates()
        .into_iter()
        .map(|c| c.model)
        .collect();
    assert_eq!(order, ["a", "b"]);
}

#[test]
fn snapshot_shows_each_entry_phase_pid_and_leases() {
    let mut state = new_state();
    let now = Instant::now();
    start_ready(&mut state, "a", 7, now);
    lease(&mut state, "a", now);
    let _ = acquire(&mut state, "b", now);
    let snapshot = state.snapshot();
    assert_eq!(snapshot.len(), 2);
    assert_eq!(
        (snapshot[0].phase, snapshot[0].pid, snapshot[0].leases),
        (Phase::Ready, Some(7), 1)
    );
    assert_eq!(
        (snapshot[1].phase, snapshot[1].pid, snapshot[1].since),
        (Phase::Starting, None, Some(now))
    );
}
