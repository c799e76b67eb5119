//! What an eviction costs, on the `small` fixture (f32, about 400 MiB resident per worker).
//!
//! Part one plays supervisor with the library's own launcher and stop code: it starts a worker,
//! runs one short generation so it is warm, and times `process::stop` gracefully (`Shutdown`,
//! then SIGTERM, then SIGKILL) and forced (an operator's SIGKILL) from the call to the reaped exit status. Next to
//! the times it puts the worker's footprint just before the stop and how much the system's
//! available memory grew, at the reap and 200 ms later. Available memory is machine-wide, so other
//! work on the machine shows up in that column.
//!
//! Part two goes through `corral serve` with a 600 MiB ceiling, which holds one `small` worker but
//! not two, and times streamed chat requests to their first content chunk: a request to the model
//! that is already loaded, and one to the other model, which must evict the loaded worker and
//! start its own. It ends with the eviction totals from `GET /admin/memory`, the server's own
//! decision-to-reaped times for those swaps.
//!
//! Run it with release binaries in place (plain cargo cannot link MLX on Linux):
//!
//! ```text
//! cargo xtask cargo build --release --bins
//! cargo xtask cargo bench -p corral-tests --bench eviction
//! ```
//!
//! `CORRAL_BENCH_ITERATIONS` sets the number of stops of each kind and of requests per case
//! (default 5). Only 127.0.0.1 is contacted.

use std::collections::BTreeMap;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use corral::memory::{process_footprint, system_memory};
use corral::pool::{StopOrder, StopReason};
use corral::process::{Spawner, StopStep, WorkerClient, stop};
use corral_fixture::{Arch, Size};
use corral_ipc::FromWorker;
use corral_tests::bench::{self, CorralServer};
use corral_tests::server::{Dirs, sse_events};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

const DEFAULT_ITERATIONS: usize = 5;
/// The fixtures, named after their architectures; both are `small`.
const MODELS: [&str; 2] = ["llama", "qwen3"];
/// Holds one `small` worker (about 400 MiB resident) but not two.
const ONE_SMALL_MODEL: &str = "600MiB";
/// Each step of a graceful stop, as the server's default.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long after the reap available memory is sampled again.
const SETTLE: Duration = Duration::from_millis(200);
/// Startup, shutdown and any single request; generous, since the machine may be busy.
const PATIENCE: Duration = Duration::from_secs(120);
const MIB: f64 = (1u64 << 20) as f64;

fn main() {
    let iterations = bench::iterations(DEFAULT_ITERATIONS);
    let dirs = Dirs::with_sized_models(Size::Small, &[Arch::Llama, Arch::Qwen3]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    let stops = runtime.block_on(measure_stops(dirs.models.path(), iterations));
    drop(runtime);

    let corral = Corral::start(&dirs);
    let first_tokens = measure_first_tokens(&corral, iterations);
    let memory = corral.get("/admin/memory");
    drop(corral);

    let cores = thread::available_parallelism().map_or(0, usize::from);
    let total = system_memory().total as f64 / MIB;
    println!("cores available: {cores}, total RAM: {total:.0} MiB");
    println!("\nstopping a warm `small` worker, {iterations} times each\n");
    print_stops(&stops);
    println!(
        "\ntime to first content chunk through corral serve (ceiling {ONE_SMALL_MODEL}), \
         {iterations} requests per case\n"
    );
    print_first_tokens(&first_tokens);
    println!("\nevictions reported by GET /admin/memory (whole run, warm-up included)\n");
    print_evictions(&memory);
}

/// Nearest-rank percentile of samples, in milliseconds.
fn percentile(samples: &[Duration], p: usize) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank - 1].as_secs_f64() * 1e3
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

// Part one: stops on the library.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum StopKind {
    /// `Shutdown`, then SIGTERM, then SIGKILL, each after the grace.
    Graceful,
    /// SIGKILL at once, as `corral kill` sends it.
    Forced,
}

struct StopSample {
    /// From the stop call to the reaped exit status.
    elapsed: Duration,
    step: StopStep,
    footprint: u64,
    /// Growth of the system's available memory, at the reap and `SETTLE` later.
    freed_at_reap: f64,
    freed_settled: f64,
}

/// Stops of each kind, interleaved so that load from elsewhere lands on both alike. On a panic,
/// dropping the runtime drops each worker's `Child`, which the launcher spawns with
/// `kill_on_drop`.
async fn measure_stops(models: &Path, n: usize) -> BTreeMap<StopKind, Vec<StopSample>> {
    let state = tempfile::tempdir().expect("temporary state directory");
    let launcher = bench::launcher(models, state.path());
    let mut samples: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for _ in 0..n {
        for kind in [StopKind::Graceful, StopKind::Forced] {
            let sample = stop_once(&launcher, kind).await;
            samples.entry(kind).or_default().push(sample);
        }
    }
    samples
}

async fn stop_once(launcher: &Spawner, kind: StopKind) -> StopSample {
    let worker = launcher
        .launch(MODELS[0], u64::MAX)
        .await
        .unwrap_or_else(|error| panic!("starting a worker: {error}"));
    let handle = worker.handle;
    warm_up(&handle).await;
    let footprint = process_footprint(worker.pid).expect("reading the worker's footprint");
    let before = system_memory().available as f64;
    let started = Instant::now();
    let order = match kind {
        StopKind::Graceful => StopOrder::Graceful(StopReason::Evicted),
        StopKind::Forced => StopOrder::Signal(Signal::SIGKILL),
    };
    let step = stop(&handle, order, STOP_GRACE).await.step;
    let elapsed = started.elapsed();
    let at_reap = system_memory().available as f64;
    tokio::time::sleep(SETTLE).await;
    let settled = system_memory().available as f64;
    StopSample {
        elapsed,
        step,
        footprint,
        freed_at_reap: at_reap - before,
        freed_settled: settled - before,
    }
}

/// One short generation, so the stop meets a worker that has run the model.
async fn warm_up(worker: &WorkerClient) {
    let request = bench::generate_request("Once upon a time", 2);
    let mut handle = worker
        .generate(request)
        .await
        .expect("sending a request to the worker");
    while let Some(frame) = handle.events.recv().await {
        match frame {
            FromWorker::Done { .. } => return,
            FromWorker::Rejected { message, .. } | FromWorker::Error { message, .. } => {
                panic!("the worker failed the warm-up request: {message}");
            }
            _ => {}
        }
    }
    panic!("the worker's stream ended without Done");
}

fn print_stops(stops: &BTreeMap<StopKind, Vec<StopSample>>) {
    println!(
        "| kind | median ms | max ms | footprint before (MiB) | available increase at reap, \
         median (min..max) MiB | available increase +200 ms, median (min..max) MiB | step |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|");
    for (kind, samples) in stops {
        let elapsed: Vec<_> = samples.iter().map(|s| s.elapsed).collect();
        let mib = |value: fn(&StopSample) -> f64| {
            mib_spread(&samples.iter().map(value).collect::<Vec<_>>())
        };
        println!(
            "| {} | {:.1} | {:.1} | {} | {} | {} | {} |",
            format!("{kind:?}").to_lowercase(),
            percentile(&elapsed, 50),
            percentile(&elapsed, 100),
            mib(|s| s.footprint as f64),
            mib(|s| s.freed_at_reap),
            mib(|s| s.freed_settled),
            step_counts(
                samples
                    .iter()
                    .map(|s| format!("{:?}", s.step).to_lowercase())
            )
        );
    }
}

/// Byte counts in MiB: the median, and the range where the samples differ.
fn mib_spread(bytes: &[f64]) -> String {
    // Adding 0.0 turns a rounded -0 into 0.
    let mib = |b: f64| (b / MIB).round() + 0.0;
    let (low, high) = bytes.iter().fold((f64::MAX, f64::MIN), |(low, high), &b| {
        (low.min(mib(b)), high.max(mib(b)))
    });
    let median = mib(median(bytes));
    if low == high {
        format!("{median}")
    } else {
        format!("{median} ({low}..{high})")
    }
}

/// "graceful ×4, killed ×1".
fn step_counts(steps: impl Iterator<Item = String>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for step in steps {
        *counts.entry(step).or_default() += 1;
    }
    let counts: Vec<_> = counts
        .iter()
        .map(|(step, n)| format!("{step} ×{n}"))
        .collect();
    counts.join(", ")
}

// Part two: time to first token through `corral serve`.

/// `corral serve` as a child process, stopped (SIGTERM, which drains and stops its workers, then
/// SIGKILL) and reaped when dropped, panics included.
struct Corral {
    server: CorralServer,
}

impl Corral {
    fn start(dirs: &Dirs) -> Self {
        let (models, state) = (dirs.models.path(), dirs.state.path());
        let limit = ["--memory-ceiling", ONE_SMALL_MODEL];
        Self {
            server: CorralServer::start(models, state, &limit, PATIENCE),
        }
    }

    fn get(&self, path: &str) -> Value {
        self.server.get_json(path)
    }

    /// Workers stopped to make room so far.
    fn evictions(&self) -> u64 {
        self.get("/admin/memory")["evictions"]["evicted"]["count"]
            .as_u64()
            .unwrap_or(0)
    }

    /// A streamed chat request, from sending it to the first chunk with content; the rest of the
    /// stream is read to `[DONE]` untimed.
    fn first_token(&self, model: &str) -> Duration {
        let body = json!({
            "model": model,
            "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": 2,
            "temperature": 0,
            "stream": true,
        });
        let started = Instant::now();
        let mut first = None;
        for data in sse_events(self.server.post("/v1/chat/completions", &body)) {
            let now = Instant::now();
            if data == "[DONE]" {
                return first.unwrap_or_else(|| panic!("{model}: corral streamed no content"));
            }
            let chunk: Value = serde_json::from_str(&data).expect("an SSE chunk is JSON");
            assert!(chunk.get("error").is_none(), "{model}: {chunk}");
            let content = chunk["choices"][0]["delta"]["content"].as_str();
            if first.is_none() && content.is_some_and(|text| !text.is_empty()) {
                first = Some(now - started);
            }
        }
        panic!("{model}: corral's event stream ended without [DONE]");
    }

    /// `first_token`, checking that it evicted `expected_evictions` workers.
    fn first_token_evicting(&self, model: &str, expected_evictions: u64) -> Duration {
        let before = self.evictions();
        let elapsed = self.first_token(model);
        let evicted = self.evictions() - before;
        assert_eq!(
            evicted, expected_evictions,
            "evictions for a request to {model}"
        );
        elapsed
    }
}

struct FirstTokens {
    no_swap: Vec<Duration>,
    swap: Vec<Duration>,
}

/// (a) the same model twice in a row, the second timed; (b) alternating models, each request
/// evicting the other's worker. Both models are loaded once first, untimed.
fn measure_first_tokens(corral: &Corral, n: usize) -> FirstTokens {
    for model in MODELS {
        corral.first_token(model);
    }
    let mut no_swap = Vec::with_capacity(n);
    for round in 0..n {
        let model = MODELS[round % 2];
        corral.first_token(model);
        no_swap.push(corral.first_token_evicting(model, 0));
    }
    // The last pair left MODELS[(n - 1) % 2] loaded.
    let swap = (0..n)
        .map(|round| corral.first_token_evicting(MODELS[(n + round) % 2], 1))
        .collect();
    FirstTokens { no_swap, swap }
}

fn print_first_tokens(first_tokens: &FirstTokens) {
    println!("| case | median ms | p90 ms | min ms | max ms |");
    println!("|---|---:|---:|---:|---:|");
    let cases = [
        ("no swap (model loaded)", &first_tokens.no_swap),
        ("swap (evict the other, start own)", &first_tokens.swap),
    ];
    for (case, samples) in cases {
        println!(
            "| {case} | {:.1} | {:.1} | {:.1} | {:.1} |",
            percentile(samples, 50),
            percentile(samples, 90),
            percentile(samples, 0),
            percentile(samples, 100)
        );
    }
}

/// The totals per reason, then each reason's recent records: decision-to-reaped times, and the
/// growth of available memory across each stop next to the footprint it freed.
fn print_evictions(memory: &Value) {
    println!(
        "| reason | count | freed MiB (total) | freed MiB (mean) | decision-to-reaped ms (total) \
         | mean ms | median ms (recent) | max ms (recent) | available increase, median \
         (min..max) MiB (recent) | steps (recent) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let totals = memory["evictions"].as_object().expect("eviction totals");
    let recent = memory["recent_evictions"]
        .as_array()
        .expect("recent evictions");
    for (reason, total) in totals {
        let count = total["count"].as_u64().unwrap_or(0);
        let freed = total["freed_bytes"].as_f64().unwrap_or(0.0) / MIB;
        let duration = total["duration_ms"].as_f64().unwrap_or(0.0);
        let records: Vec<_> = recent.iter().filter(|r| r["reason"] == *reason).collect();
        let field = |record: &Value, name: &str| record[name].as_f64().unwrap_or(0.0);
        let durations: Vec<_> = records
            .iter()
            .map(|r| Duration::from_secs_f64(field(r, "duration_ms") / 1e3))
            .collect();
        let available: Vec<_> = records
            .iter()
            .map(|r| field(r, "available_after_bytes") - field(r, "available_before_bytes"))
            .collect();
        let (median_ms, max_ms, available) = if records.is_empty() {
            (f64::NAN, f64::NAN, "-".to_owned())
        } else {
            let spread = mib_spread(&available);
            (
                percentile(&durations, 50),
                percentile(&durations, 100),
                spread,
            )
        };
        let steps = step_counts(
            records
                .iter()
                .map(|r| r["step"].as_str().unwrap_or("?").to_owned()),
        );
        let per = count.max(1) as f64;
        println!(
            "| {reason} | {count} | {freed:.0} | {:.0} | {duration:.1} | {:.1} | {median_ms:.1} \
             | {max_ms:.1} | {available} | {steps} |",
            freed / per,
            duration / per,
        );
    }
}
