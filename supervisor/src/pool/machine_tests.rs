//! Each transition of `PoolState` on its own, with a clock the test moves by hand.

use std::time::{Duration, Instant};

use super::launcher::LaunchedWorker;
use super::machine::{AcquireStep, ExitOutcome, PoolState};
use super::state::{EntryState, ExitInfo, ExitStatus, Phase, StopReason, Worker};

const KILLED: ExitStatus = ExitStatus::Signal(9);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Starts `model` and completes its launch as `pid`.
fn start_ready(state: &mut PoolState<u32>, model: &str, pid: u32, now: Instant) -> u64 {
    let AcquireStep::Launch { generation, .. } = state.acquire(model, now) else {
        panic!("{model} should start");
    };
    assert!(state.launched(model, generation, LaunchedWorker { pid, handle: pid }, now));
    generation
}

fn lease(state: &mut PoolState<u32>, model: &str, now: Instant) -> Worker<u32> {
    match state.acquire(model, now) {
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
    let mut state = PoolState::<u32>::new();
    let now = Instant::now();
    let AcquireStep::Launch { generation, done } = state.acquire("m", now) else {
        panic!("NotRunning should start");
    };
    assert_eq!(phase(&state, "m"), Phase::Starting);
    let AcquireStep::Wait(waiter) = state.acquire("m", now) else {
        panic!("Starting should wait");
    };
    assert!(state.launched("m", generation, LaunchedWorker { pid: 7, handle: 7 }, now));
    assert_eq!(phase(&state, "m"), Phase::Ready);
    // Leaving Starting dropped the sender: both receivers see it.
    assert!(done.has_changed().is_err());
    assert!(waiter.has_changed().is_err());
}

#[test]
fn a_lease_is_counted_on_ready_and_given_back_on_release() {
    let mut state = PoolState::new();
    let t0 = Instant::now();
    let generation = start_ready(&mut state, "m", 7, t0);
    let worker = lease(&mut state, "m", t0 + secs(1));
    assert_eq!((worker.pid, worker.generation), (7, generation));
    lease(&mut state, "m", t0 + secs(2));
    assert_eq!(leases(&state, "m"), 2);
    state.release("m", generation, t0 + secs(3));
    state.release("m", generation, t0 + secs(4));
    assert_eq!(leases(&state, "m"), 0);
    assert_eq!(state.idle_candidates()[0].last_used, t0 + secs(4));
}

#[test]
fn begin_stop_refuses_a_leased_worker() {
    let mut state = PoolState::new();
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
    state.release("m", generation, now);
    assert!(state.begin_stop("m", StopReason::Evicted, now).is_some());
}

#[test]
fn a_stopped_worker_is_not_running_once_reaped_and_requests_wait_until_then() {
    let mut state = PoolState::new();
    let now = Instant::now();
    start_ready(&mut state, "m", 7, now);
    let worker = state.begin_stop("m", StopReason::Idle, now).unwrap();
    assert_eq!(worker.pid, 7);
    assert_eq!(phase(&state, "m"), Phase::Stopping(StopReason::Idle));
    assert!(state.begin_stop("m", StopReason::Idle, now).is_none());
    let AcquireStep::Wait(waiter) = state.acquire("m", now) else {
        panic!("Stopping should wait");
    };
    assert_eq!(
        state.on_exit("m", 7, ExitStatus::Code(0), now),
        ExitOutcome::Stopped
    );
    assert_eq!(phase(&state, "m"), Phase::NotRunning);
    assert!(waiter.has_changed().is_err());
    assert!(matches!(
        state.acquire("m", now),
        AcquireStep::Launch { .. }
    ));
}

#[test]
fn pinned_workers_are_never_evicted_or_idled_but_can_be_unloaded() {
    let mut state = PoolState::new();
    let now = Instant::now();
    state.set_pinned("m", true);
    start_ready(&mut state, "m", 7, now);
    assert!(state.idle_candidates().is_empty());
    assert!(state.begin_stop("m", StopReason::Evicted, now).is_none());
    assert!(state.begin_stop("m", StopReason::Idle, now).is_none());
    assert!(state.begin_stop("m", StopReason::Unload, now).is_some());
}

#[test]
fn failed_starts_back_off_exponentially_then_start_again() {
    let mut state = PoolState::<u32>::new();
    let mut now = Instant::now();
    for (attempt, wait) in [(1, 1), (2, 2), (3, 4)] {
        let AcquireStep::Launch { generation, .. } = state.acquire("m", now) else {
            panic!("attempt {attempt} should start");
        };
        state.launch_failed("m", generation, "boom".to_owned(), now);
        let AcquireStep::CrashLooping {
            attempts,
            retry_after,
            last_exit,
        } = state.acquire("m", now + secs(wait) - Duration::from_millis(1))
        else {
            panic!("attempt {attempt} should be in backoff");
        };
        assert_eq!((attempts, retry_after), (attempt, Duration::from_millis(1)));
        assert_eq!(
            last_exit,
            ExitInfo::LaunchFailed {
                message: "boom".to_owned()
            }
        );
        now += secs(wait);
    }
    assert_eq!(state.snapshot()[0].restarts, 3);
    let generation = start_ready(&mut state, "m", 7, now);
    // The streak survives a start: a crash right after it backs off 8 s.
    let outcome = state.on_exit("m", 7, KILLED, now + secs(1));
    assert_eq!(
        outcome,
        ExitOutcome::Crashed {
            backoff: Some(secs(8))
        }
    );
    assert_eq!(generation, 4);
}

#[test]
fn a_crash_after_a_stable_run_restarts_at_once() {
    let mut state = PoolState::new();
    let now = Instant::now();
    start_ready(&mut state, "m", 7, now);
    let later = now + secs(61);
    assert_eq!(
        state.on_exit("m", 7, KILLED, later),
        ExitOutcome::Crashed { backoff: None }
    );
    assert!(matches!(
        state.acquire("m", later),
        AcquireStep::Launch { .. }
    ));
}

#[test]
fn a_worker_reported_dead_before_its_launch_returned_is_never_ready() {
    let mut state = PoolState::<u32>::new();
    let now = Instant::now();
    let AcquireStep::Launch { generation, .. } = state.acquire("m", now) else {
        panic!("should start");
    };
    assert_eq!(state.on_exit("m", 7, KILLED, now), ExitOutcome::DuringStart);
    assert!(!state.launched("m", generation, LaunchedWorker { pid: 7, handle: 7 }, now));
    assert_eq!(phase(&state, "m"), Phase::Failed);
}

#[test]
fn an_exit_of_another_pid_during_start_does_not_stop_the_start() {
    let mut state = PoolState::<u32>::new();
    let now = Instant::now();
    let AcquireStep::Launch { generation, .. } = state.acquire("m", now) else {
        panic!("should start");
    };
    state.on_exit("m", 6, KILLED, now);
    assert!(state.launched("m", generation, LaunchedWorker { pid: 7, handle: 7 }, now));
}

#[test]
fn a_lease_of_a_dead_worker_does_not_change_its_successor() {
    let mut state = PoolState::new();
    let now = Instant::now();
    let old = start_ready(&mut state, "m", 7, now);
    lease(&mut state, "m", now);
    let later = now + secs(120);
    state.on_exit("m", 7, KILLED, later);
    let new = start_ready(&mut state, "m", 8, later);
    lease(&mut state, "m", later);
    state.release("m", old, later);
    assert_eq!(leases(&state, "m"), 1);
    state.release("m", new, later);
    assert_eq!(leases(&state, "m"), 0);
}

#[test]
fn exits_of_unknown_or_past_workers_are_ignored() {
    let mut state = PoolState::new();
    let now = Instant::now();
    assert_eq!(state.on_exit("nobody", 1, KILLED, now), ExitOutcome::Stale);
    start_ready(&mut state, "m", 7, now);
    assert_eq!(state.on_exit("m", 6, KILLED, now), ExitOutcome::Stale);
    assert_eq!(phase(&state, "m"), Phase::Ready);
}

#[test]
fn idle_candidates_are_unleased_unpinned_and_least_recently_used_first() {
    let mut state = PoolState::new();
    let t0 = Instant::now();
    for (i, model) in ["a", "b", "c", "d"].into_iter().enumerate() {
        start_ready(&mut state, model, i as u32 + 1, t0);
    }
    let b = lease(&mut state, "b", t0 + secs(5)).generation;
    state.release("b", b, t0 + secs(5));
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
    let mut state = PoolState::new();
    let now = Instant::now();
    start_ready(&mut state, "a", 7, now);
    lease(&mut state, "a", now);
    let _ = state.acquire("b", now);
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
