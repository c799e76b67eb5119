//! The race between leases and stops, proven absent: a memory ceiling that holds one of three
//! models at a time, idle timeouts of a second, a mixed flood of embeddings, rerank and chat
//! requests from several clients, and workers SIGKILLed now and then. Every request gets its
//! answer, or a 507 after the admission wait, or, only when its own worker was killed, a clean
//! error naming that worker; none fails because its worker was stopped (for memory or
//! idleness) while it held the lease; and every lease count in `corral ps` returns to 0.
//!
//! The flood is bounded by a count of requests and the kills are paced by finished requests,
//! never by the clock, so the test does the same work on a fast machine and on a busy one.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::Duration;

use corral_fixture::{Arch, Size, Task};
use corral_tests::server::{Dirs, Server, chat, client_outlasting};
use corral_tests::{binary, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// Tiny fixtures, as measured on Linux: a worker's footprint is 30 to 40 MiB and a model's
/// estimate 28 (the chat model) to 51 MiB (an encoder, whose estimate is its weights and the
/// process's base), so a ceiling of 56 MiB admits any one model alone but never a second beside
/// a live or starting worker.
const ONE_TINY_MODEL: &str = "56MiB";
/// Long enough that a request waiting for room is normally served: a 507 is allowed, not aimed
/// at.
const ADMISSION_WAIT: Duration = Duration::from_secs(30);
const CLIENTS: usize = 4;
const REQUESTS_PER_CLIENT: usize = 200;
/// The flood comes in this many waves; between two, the clients wait until the idle timeout
/// has stopped every worker, so the next wave starts them again from nothing.
const WAVES: usize = 4;
/// A worker is killed after every this many finished requests.
const KILL_EVERY: usize = 10;

const MODELS: [&str; 3] = ["chat", "embedder", "reranker"];

/// A small deterministic generator, so that a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// One request of the flood and what came back.
struct Outcome {
    model: &'static str,
    status: u16,
    body: Value,
}

fn request(server: &Server, client: &reqwest::blocking::Client, model: &'static str) -> Outcome {
    let (path, body) = match model {
        "embedder" => (
            "/v1/embeddings",
            json!({"model": model, "input": ["a short sentence", "another one"]}),
        ),
        "reranker" => (
            "/v1/rerank",
            json!({"model": model, "query": "which one", "documents": ["this", "that one", "none"]}),
        ),
        _ => ("/v1/chat/completions", chat(model, 4, false)),
    };
    let response = client
        .post(server.url(path))
        .json(&body)
        .send()
        .expect("the server answers");
    let status = response.status().as_u16();
    let body = response.json().unwrap_or(Value::Null);
    Outcome {
        model,
        status,
        body,
    }
}

/// Whether a 200's body is the answer its endpoint promises.
fn is_answer(outcome: &Outcome) -> bool {
    match outcome.model {
        "embedder" => outcome.body["data"]
            .as_array()
            .is_some_and(|data| data.len() == 2),
        "reranker" => outcome.body["results"]
            .as_array()
            .is_some_and(|results| results.len() == 3),
        _ => outcome.body["choices"][0]["message"].is_object(),
    }
}

/// The pids of ready workers, from `GET /admin/workers` (what `corral ps --json` prints).
fn ready_workers(server: &Server) -> Vec<(String, u32)> {
    let workers = server.get_json("/admin/workers");
    workers["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["state"] == "ready")
        .filter_map(|row| {
            let pid = row["pid"].as_u64()? as u32;
            Some((row["model"].as_str()?.to_owned(), pid))
        })
        .collect()
}

#[test]
fn a_mixed_flood_with_killed_workers_under_a_one_model_ceiling_loses_no_lease() {
    let dirs = Dirs::with_models(&[]);
    dirs.add_task_fixture("chat", Size::Tiny, Arch::Llama, Task::Chat);
    dirs.add_task_fixture("embedder", Size::Tiny, Arch::Bert, Task::Embedding);
    dirs.add_task_fixture("reranker", Size::Tiny, Arch::Bert, Task::Rerank);
    let server = Server::start_with(
        &dirs,
        &[
            OsStr::new("--memory-ceiling"),
            OsStr::new(ONE_TINY_MODEL),
            OsStr::new("--idle-timeout"),
            OsStr::new("1"),
            OsStr::new("--admission-wait"),
            OsStr::new(&ADMISSION_WAIT.as_secs().to_string()),
        ],
    );

    let finished = AtomicUsize::new(0);
    let flood_over = AtomicBool::new(false);
    let killed: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());
    let outcomes: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    let most_loaded = AtomicUsize::new(0);
    let wave_end = Barrier::new(CLIENTS);
    let (server, finished, flood_over, killed, outcomes, most_loaded, wave_end) = (
        &server,
        &finished,
        &flood_over,
        &killed,
        &outcomes,
        &most_loaded,
        &wave_end,
    );
    thread::scope(|scope| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|index| {
                scope.spawn(move || {
                    let client = client_outlasting(ADMISSION_WAIT);
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1));
                    for _ in 0..WAVES {
                        for _ in 0..REQUESTS_PER_CLIENT / WAVES {
                            let model = MODELS[rng.below(MODELS.len())];
                            let outcome = request(server, &client, model);
                            outcomes.lock().unwrap().push(outcome);
                            finished.fetch_add(1, Ordering::SeqCst);
                        }
                        if wave_end.wait().is_leader() {
                            wait_until("the idle timeout to stop every worker", || {
                                ready_workers(server).is_empty()
                            });
                        }
                        wave_end.wait();
                    }
                })
            })
            .collect();
        scope.spawn(move || {
            let mut rng = Rng(0xD1B5_4A32_D192_ED03);
            let mut next_kill = KILL_EVERY;
            while !flood_over.load(Ordering::SeqCst) {
                let workers = ready_workers(server);
                most_loaded.fetch_max(workers.len(), Ordering::SeqCst);
                if finished.load(Ordering::SeqCst) >= next_kill && !workers.is_empty() {
                    let (model, pid) = &workers[rng.below(workers.len())];
                    // Recorded before the signal: a request can only fail of it afterwards.
                    killed.lock().unwrap().insert(*pid);
                    eprintln!("killing the worker for {model} (pid {pid})");
                    let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGKILL);
                    next_kill += KILL_EVERY;
                }
                thread::sleep(Duration::from_millis(20));
            }
        });
        for client in clients {
            client.join().unwrap();
        }
        flood_over.store(true, Ordering::SeqCst);
    });

    let outcomes = outcomes.lock().unwrap();
    let killed = killed.lock().unwrap();
    assert_eq!(outcomes.len(), CLIENTS * REQUESTS_PER_CLIENT);
    assert!(!killed.is_empty(), "the flood ended before any kill");
    let mut answered = 0;
    for outcome in outcomes.iter() {
        let (model, status, body) = (outcome.model, outcome.status, &outcome.body);
        match status {
            200 => {
                assert!(is_answer(outcome), "{model}: {body}");
                answered += 1;
            }
            507 => assert_eq!(body["error"]["code"], "insufficient_memory", "{body}"),
            500..=599 => {
                // Only a killed worker's own requests may fail, and they must name it. The
                // signal is named too when the reaper had the exit status by the time the
                // connection gave up waiting for it, which a busy machine can miss.
                let message = body["error"]["message"].as_str().unwrap_or_default();
                let named = killed
                    .iter()
                    .any(|pid| message.contains(&format!("(pid {pid})")));
                assert!(
                    named,
                    "{model}: {status} not caused by a kill ({killed:?}): {body}"
                );
            }
            _ => panic!("{model}: unexpected {status}: {body}"),
        }
    }
    let mut by_status = std::collections::BTreeMap::new();
    for outcome in outcomes.iter() {
        *by_status
            .entry((outcome.model, outcome.status))
            .or_insert(0) += 1;
    }
    eprintln!(
        "{answered} of {} answered, {} workers killed; by model and status: {by_status:?}",
        outcomes.len(),
        killed.len()
    );
    assert!(answered > 0, "no request was answered");
    assert!(
        most_loaded.load(Ordering::SeqCst) <= 1,
        "the ceiling holds one model at a time"
    );

    // Every lease was given back, as `corral ps` shows it.
    wait_until("every lease count to be 0", || {
        let output = Command::new(binary("corral"))
            .args(["ps", "--json", "--url"])
            .arg(server.url(""))
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let workers: Value = serde_json::from_slice(&output.stdout).unwrap();
        workers["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|row| row["leases"] == 0)
    });
    let lines = server.log_lines();
    assert!(
        !lines.iter().any(|line| line.contains("panicked")),
        "the server panicked"
    );
}
