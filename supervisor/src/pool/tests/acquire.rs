//! `Pool::acquire`, stops and the lease guard through the async API, with simulated processes:
//! shared starts, the crash-loop rule, admission that makes room, and a ready model that never
//! waits on another model.

use std::time::Duration;

use super::super::machine::lock;
use super::super::{AcquireError, ExitInfo, ExitStatus, Limits, Phase, Pool, Refusal, StopReason};
use super::sim::{SimEvent, SimOutcome, SimProcesses, roomy};
use crate::memory::Budget;

const NO_WAIT: Duration = Duration::ZERO;
/// Long enough that a test that meant to wait never gives up first on a slow machine.
const PATIENT: Duration = Duration::from_secs(600);

fn leases(pool: &Pool<SimProcesses>, model: &str) -> u32 {
    pool.snapshot()
        .iter()
        .find(|entry| entry.model == model)
        .map_or(0, |entry| entry.leases)
}

/// Room for `bytes` in all, with the watermarks at their defaults.
fn ceiling(bytes: u64) -> Limits {
    Limits {
        budget: Budget::new(bytes, 0.85, 0.95),
        max_loaded_models: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_first_requests_share_one_start() {
    let sim = SimProcesses::with_delay(Duration::from_millis(50));
    let pool = sim.pool(roomy());
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.acquire("m", NO_WAIT).await })
        })
        .collect();
    let mut held = Vec::new();
    for task in tasks {
        held.push(task.await.unwrap().unwrap());
    }
    assert_eq!(sim.launches(), 1);
    assert!(held.iter().all(|lease| lease.pid() == held[0].pid()));
    assert_eq!(leases(&pool, "m"), 50);
    drop(held);
    assert_eq!(leases(&pool, "m"), 0);
}

#[tokio::test]
async fn a_failed_start_fails_its_requests_and_the_next_request_tries_again() {
    let sim = SimProcesses::default();
    sim.then(SimOutcome::LoadFails);
    let pool = sim.pool(roomy());
    let Err(AcquireError::StartFailed {
        exit: ExitInfo::LaunchFailed { message },
        retry_after,
        ..
    }) = pool.acquire("m", PATIENT).await
    else {
        panic!("a failed start should fail the request that waited on it");
    };
    assert!(message.contains("simulated load failure"), "{message}");
    assert_eq!(retry_after, Duration::ZERO);
    assert!(pool.acquire("m", NO_WAIT).await.is_ok());
    assert_eq!(sim.launches(), 2);
}

#[tokio::test]
async fn three_failed_starts_in_a_row_start_a_backoff_that_a_request_waits_for_when_it_can() {
    let sim = SimProcesses::default();
    for _ in 0..3 {
        sim.then(SimOutcome::LoadFails);
    }
    let pool = sim.pool(roomy());
    for _ in 0..3 {
        let failed = pool.acquire("m", NO_WAIT).await;
        assert!(matches!(failed, Err(AcquireError::StartFailed { .. })));
    }
    let Err(AcquireError::CrashLooping {
        streak,
        retry_after,
        ..
    }) = pool.acquire("m", NO_WAIT).await
    else {
        panic!("a request that cannot wait should be refused during the backoff");
    };
    assert_eq!(streak, 3);
    assert!(retry_after <= Duration::from_secs(1) && !retry_after.is_zero());
    assert_eq!(sim.launches(), 3);
    let lease = pool.acquire("m", PATIENT).await.unwrap();
    assert_eq!(sim.launches(), 4);
    assert_eq!(lease.model(), "m");
}

#[tokio::test]
async fn a_model_found_unservable_fails_its_request_as_such_and_starts_no_backoff() {
    let sim = SimProcesses::default();
    for _ in 0..2 {
        sim.then(SimOutcome::LoadFails);
    }
    sim.then(SimOutcome::Unservable);
    let pool = sim.pool(roomy());
    for _ in 0..2 {
        let failed = pool.acquire("m", NO_WAIT).await;
        assert!(matches!(failed, Err(AcquireError::StartFailed { .. })));
    }
    let Err(AcquireError::Unservable { model, reason }) = pool.acquire("m", PATIENT).await else {
        panic!("the request that waited on the start should hear the model is unservable");
    };
    assert_eq!(model, "m");
    assert_eq!(reason, "/models/m: tensor model.norm.weight is missing");
    assert_eq!(sim.launches(), 3);
    // Still two failures in a row: the next start comes at once, with no backoff.
    assert!(pool.acquire("m", NO_WAIT).await.is_ok());
    assert_eq!(sim.launches(), 4);
}

#[tokio::test]
async fn a_panicking_launcher_fails_the_start_instead_of_hanging() {
    let sim = SimProcesses::default();
    sim.then(SimOutcome::Panics);
    let pool = sim.pool(roomy());
    let result = tokio::time::timeout(PATIENT, pool.acquire("m", NO_WAIT)).await;
    assert!(matches!(result, Ok(Err(AcquireError::StartFailed { .. }))));
}

#[tokio::test]
async fn a_ready_worker_killed_from_outside_is_replaced_by_the_next_request_every_time() {
    let sim = SimProcesses::default();
    let pool = sim.pool(roomy());
    let mut pids = Vec::new();
    for _ in 0..10 {
        let lease = pool.acquire("m", NO_WAIT).await.unwrap();
        let pid = lease.pid();
        pids.push(pid);
        sim.exit("m", pid, ExitStatus::Signal(9)).await.unwrap();
        drop(lease);
        wait_for_phase(&pool, "m", Phase::NotRunning).await;
    }
    pids.dedup();
    assert_eq!(
        pids.len(),
        10,
        "every request after a kill got a new worker"
    );
}

#[tokio::test]
async fn a_ready_worker_that_keeps_crashing_before_finishing_a_request_starts_a_backoff() {
    let sim = SimProcesses::default();
    let pool = sim.pool(roomy());
    for round in 1..=3 {
        let lease = pool.acquire("m", NO_WAIT).await.unwrap();
        sim.exit("m", lease.pid(), ExitStatus::Signal(11))
            .await
            .unwrap();
        drop(lease);
        let expected = if round < 3 {
            Phase::NotRunning
        } else {
            Phase::Failed
        };
        wait_for_phase(&pool, "m", expected).await;
    }
    let refused = pool.acquire("m", NO_WAIT).await;
    assert!(matches!(
        refused,
        Err(AcquireError::CrashLooping { streak: 3, .. })
    ));
}

#[tokio::test]
async fn a_finished_request_ends_the_streak_of_crashes() {
    let sim = SimProcesses::default();
    let pool = sim.pool(roomy());
    for _ in 0..5 {
        let lease = pool.acquire("m", NO_WAIT).await.unwrap();
        sim.exit("m", lease.pid(), ExitStatus::Code(1))
            .await
            .unwrap();
        drop(lease);
        wait_for_phase(&pool, "m", Phase::NotRunning).await;
        let lease = pool.acquire("m", NO_WAIT).await.unwrap();
        let pid = lease.pid();
        lease.complete();
        sim.exit("m", pid, ExitStatus::Code(1)).await.unwrap();
        wait_for_phase(&pool, "m", Phase::NotRunning).await;
    }
}

#[tokio::test]
async fn a_request_for_a_stopping_model_waits_for_the_stop_then_starts_anew() {
    let sim = SimProcesses::default();
    let pool = sim.pool(roomy());
    let first = pool.acquire("m", NO_WAIT).await.unwrap().pid();
    sim.freeze("m");
    let stop = tokio::spawn({
        let pool = pool.clone();
        async move { pool.stop("m", StopReason::Unload).await }
    });
    wait_for_phase(&pool, "m", Phase::Stopping(StopReason::Unload)).await;
    let waiting = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire("m", NO_WAIT).await.map(|lease| lease.pid()) }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiting.is_finished());
    assert_eq!(sim.launches(), 1);
    sim.exit("m", first, ExitStatus::Code(0)).await.unwrap();
    let second = waiting.await.unwrap().unwrap();
    assert_ne!(second, first);
    assert_eq!(sim.launches(), 2);
    stop.abort();
}

#[tokio::test]
async fn a_ready_model_and_one_that_fits_never_wait_on_another_models_stuck_stop() {
    let sim = SimProcesses::default();
    let pool = sim.pool(roomy());
    drop(pool.acquire("frozen", NO_WAIT).await.unwrap());
    drop(pool.acquire("ready", NO_WAIT).await.unwrap());
    sim.freeze("frozen");
    let unload = tokio::spawn({
        let pool = pool.clone();
        async move { pool.unload("frozen", StopReason::Unload, PATIENT).await }
    });
    wait_for_phase(&pool, "frozen", Phase::Stopping(StopReason::Unload)).await;
    let ready = tokio::time::timeout(PATIENT, pool.acquire("ready", NO_WAIT)).await;
    assert!(ready.unwrap().is_ok());
    let fresh = tokio::time::timeout(PATIENT, pool.acquire("fresh", NO_WAIT)).await;
    assert!(fresh.unwrap().is_ok());
    assert!(!unload.is_finished());
    unload.abort();
}

#[tokio::test]
async fn admission_stops_the_least_recently_used_idle_worker_and_starts_after_its_reap() {
    let sim = SimProcesses::default();
    sim.estimate_of("a", 400)
        .estimate_of("b", 400)
        .estimate_of("c", 400);
    let pool = sim.pool(ceiling(1000));
    let a = pool.acquire("a", NO_WAIT).await.unwrap().pid();
    drop(pool.acquire("b", NO_WAIT).await.unwrap());
    pool.acquire("c", NO_WAIT).await.unwrap();
    let events = sim.events();
    let stop = events
        .iter()
        .position(|e| *e == SimEvent::StopOrdered("a".into(), a));
    let exit = events
        .iter()
        .position(|e| *e == SimEvent::Exited("a".into(), a));
    let launch = events
        .iter()
        .position(|e| *e == SimEvent::Launched("c".into()));
    assert!(stop < exit && exit < launch, "{events:?}");
    assert_eq!(pool.phase("b"), Phase::Ready);
}

#[tokio::test]
async fn without_room_a_request_waits_for_a_busy_worker_to_go_idle_or_gets_refused() {
    let sim = SimProcesses::default();
    sim.estimate_of("a", 600).estimate_of("b", 600);
    let pool = sim.pool(ceiling(1000));
    let busy = pool.acquire("a", NO_WAIT).await.unwrap();
    let refused = pool.acquire("b", NO_WAIT).await;
    assert!(matches!(
        refused,
        Err(AcquireError::Refused {
            refusal: Refusal::NoRoom { .. },
            ..
        })
    ));
    let waiting = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire("b", PATIENT).await.map(|lease| lease.pid()) }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiting.is_finished());
    drop(busy);
    assert!(waiting.await.unwrap().is_ok());
    assert_eq!(pool.phase("a"), Phase::NotRunning);
}

#[tokio::test]
async fn budget_held_for_another_hosts_rank_counts_in_admission_until_it_is_given_back() {
    let sim = SimProcesses::default();
    sim.estimate_of("a", 600);
    let pool = sim.pool(ceiling(1000));
    let held = pool.reserve(500).await.unwrap();
    assert!(matches!(
        pool.reserve(600).await,
        Err(Refusal::NoRoom {
            needed: 600,
            used: 500,
            ceiling: 1000
        })
    ));
    let waiting = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire("a", PATIENT).await.map(|lease| lease.pid()) }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        !waiting.is_finished(),
        "no room while the rank holds its share"
    );
    drop(held);
    assert!(waiting.await.unwrap().is_ok());
}

#[tokio::test]
async fn room_for_another_hosts_rank_is_made_by_stopping_idle_workers_never_busy_ones() {
    let sim = SimProcesses::default();
    sim.estimate_of("a", 400).estimate_of("b", 400);
    let pool = sim.pool(ceiling(1000));
    let a = pool.acquire("a", NO_WAIT).await.unwrap().pid();
    let busy = pool.acquire("b", NO_WAIT).await.unwrap();
    let held = pool.reserve(500).await.unwrap();
    assert!(sim.events().contains(&SimEvent::Exited("a".into(), a)));
    assert_eq!(pool.phase("a"), Phase::NotRunning);
    assert_eq!(pool.phase("b"), Phase::Ready);
    drop(held);
    // The busy worker is never stopped for a rank: no room then.
    assert!(matches!(
        pool.reserve(700).await,
        Err(Refusal::NoRoom { needed: 700, .. })
    ));
    assert_eq!(pool.phase("b"), Phase::Ready);
    drop(busy);
}

#[tokio::test]
async fn a_model_bigger_than_the_whole_ceiling_is_refused_without_waiting() {
    let sim = SimProcesses::default();
    sim.estimate_of("huge", 2000);
    let pool = sim.pool(ceiling(1000));
    let refused =
        tokio::time::timeout(Duration::from_secs(60), pool.acquire("huge", PATIENT)).await;
    assert!(matches!(refused, Ok(Err(AcquireError::Refused { .. }))));
    assert_eq!(sim.launches(), 0);
}

/// On tokio's paused clock, so the request gives up before the start ends on any machine.
#[tokio::test(start_paused = true)]
async fn a_request_that_stops_waiting_does_not_cancel_the_start() {
    let sim = SimProcesses::with_delay(Duration::from_millis(100));
    let pool = sim.pool(roomy());
    let gave_up = tokio::time::timeout(Duration::from_millis(10), pool.acquire("m", NO_WAIT)).await;
    assert!(gave_up.is_err());
    let lease = pool.acquire("m", NO_WAIT).await.unwrap();
    assert_eq!(sim.launches(), 1);
    assert_eq!(lease.model(), "m");
}

#[tokio::test]
async fn a_lease_is_given_back_when_its_task_panics() {
    let pool = SimProcesses::default().pool(roomy());
    let task = tokio::spawn({
        let pool = pool.clone();
        async move {
            let _lease = pool.acquire("m", NO_WAIT).await.unwrap();
            panic!("request handler bug");
        }
    });
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(leases(&pool, "m"), 0);
    assert_eq!(pool.snapshot()[0].phase, Phase::Ready);
    assert_eq!(pool.idle_candidates().len(), 1);
}

#[tokio::test]
async fn unload_waits_for_the_request_in_flight_and_kill_does_not() {
    let sim = SimProcesses::default();
    let pool = sim.pool(roomy());
    let lease = pool.acquire("m", NO_WAIT).await.unwrap();
    let timed_out = pool
        .unload("m", StopReason::Unload, Duration::from_millis(20))
        .await;
    assert!(timed_out.is_err());
    let unload = tokio::spawn({
        let pool = pool.clone();
        async move { pool.unload("m", StopReason::Unload, PATIENT).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!unload.is_finished());
    drop(lease);
    unload.await.unwrap().unwrap();
    wait_for_phase(&pool, "m", Phase::NotRunning).await;

    let _serving = pool.acquire("m", NO_WAIT).await.unwrap();
    pool.kill("m", nix::sys::signal::Signal::SIGKILL)
        .await
        .unwrap();
    wait_for_phase(&pool, "m", Phase::NotRunning).await;
    assert!(lock(&pool.state).snapshot()[0].last_exit.is_some());
}

/// Waits, on the pool's own change notification, until `model` is in `phase`.
async fn wait_for_phase(pool: &Pool<SimProcesses>, model: &str, phase: Phase) {
    let reached = async {
        loop {
            let mut changes = pool.changes();
            if pool.phase(model) == phase {
                return;
            }
            let _ = changes.changed().await;
        }
    };
    tokio::time::timeout(PATIENT, reached)
        .await
        .unwrap_or_else(|_| panic!("{model} never reached {phase:?}"));
}
