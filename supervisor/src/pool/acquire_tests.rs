//! `Pool::acquire` and the lease guard through the async API, with a simulated launcher.

use std::time::Duration;

use super::sim::{SimLauncher, SimOutcome};
use super::{AcquireError, ExitInfo, ExitStatus, Phase, Pool, StopReason};

fn leases(pool: &Pool<SimLauncher>, model: &str) -> u32 {
    pool.snapshot()
        .iter()
        .find(|entry| entry.model == model)
        .map_or(0, |entry| entry.leases)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_first_requests_share_one_start() {
    let launcher = SimLauncher::with_delay(Duration::from_millis(50));
    let pool = Pool::new(launcher.clone());
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.acquire("m").await })
        })
        .collect();
    let mut held = Vec::new();
    for task in tasks {
        held.push(task.await.unwrap().unwrap());
    }
    assert_eq!(launcher.launches(), 1);
    assert!(held.iter().all(|lease| lease.pid() == held[0].pid()));
    assert_eq!(leases(&pool, "m"), 50);
    drop(held);
    assert_eq!(leases(&pool, "m"), 0);
}

#[tokio::test]
async fn a_failed_start_is_refused_with_retry_after_and_not_retried_in_backoff() {
    let launcher = SimLauncher::default();
    launcher.then(SimOutcome::LoadFails);
    let pool = Pool::new(launcher.clone());
    for _ in 0..2 {
        let Err(AcquireError::CrashLooping {
            attempts,
            retry_after,
            last_exit: ExitInfo::LaunchFailed { message },
            ..
        }) = pool.acquire("m").await
        else {
            panic!("a failed start should be refused");
        };
        assert_eq!(attempts, 1);
        assert!(retry_after <= Duration::from_secs(1));
        assert!(message.contains("simulated load failure"), "{message}");
    }
    assert_eq!(launcher.launches(), 1);
}

#[tokio::test]
async fn a_panicking_launcher_fails_the_start_instead_of_hanging() {
    let launcher = SimLauncher::default();
    launcher.then(SimOutcome::Panics);
    let pool = Pool::new(launcher);
    let result = tokio::time::timeout(Duration::from_secs(5), pool.acquire("m")).await;
    assert!(matches!(result, Ok(Err(AcquireError::CrashLooping { .. }))));
}

#[tokio::test]
async fn a_request_for_a_stopping_model_waits_for_the_stop_then_starts_anew() {
    let launcher = SimLauncher::default();
    let pool = Pool::new(launcher.clone());
    let first = pool.acquire("m").await.unwrap().pid();
    let stopping = pool.begin_stop("m", StopReason::Evicted).unwrap();
    assert_eq!(stopping.pid, first);
    let waiting = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire("m").await.map(|lease| lease.pid()) }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiting.is_finished());
    assert_eq!(launcher.launches(), 1);
    pool.on_exit("m", first, ExitStatus::Code(0));
    let second = waiting.await.unwrap().unwrap();
    assert_ne!(second, first);
    assert_eq!(launcher.launches(), 2);
}

#[tokio::test]
async fn a_request_that_stops_waiting_does_not_cancel_the_start() {
    let launcher = SimLauncher::with_delay(Duration::from_millis(100));
    let pool = Pool::new(launcher.clone());
    let gave_up = tokio::time::timeout(Duration::from_millis(10), pool.acquire("m")).await;
    assert!(gave_up.is_err());
    let lease = pool.acquire("m").await.unwrap();
    assert_eq!(launcher.launches(), 1);
    assert_eq!(lease.model(), "m");
}

#[tokio::test]
async fn a_lease_is_given_back_when_its_task_panics() {
    let pool = Pool::new(SimLauncher::default());
    let task = tokio::spawn({
        let pool = pool.clone();
        async move {
            let _lease = pool.acquire("m").await.unwrap();
            panic!("request handler bug");
        }
    });
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(leases(&pool, "m"), 0);
    assert_eq!(pool.snapshot()[0].phase, Phase::Ready);
    assert_eq!(pool.idle_candidates().len(), 1);
}
