//! What the supervisor costs: the same generation sent through `corral serve` over HTTP and sent
//! straight to a `corral-worker` socket, on the same generated fixture models.
//!
//! The direct path reuses the supervisor library's own launcher and worker client, so the two
//! paths differ only by what `corral` adds: HTTP, JSON, routing and the pool. Requests alternate
//! between the paths, so load from elsewhere on the machine lands on both alike.
//!
//! Prints two markdown tables: the latency of a 1-token completion (p50, p99), and streamed
//! tokens per second (completion tokens over the time from the first text to the end; the ratio
//! is corral's rate over the direct one). Run it with release binaries in place:
//!
//! ```text
//! cargo xtask cargo build --release --bins
//! cargo xtask cargo bench -p corral-tests --bench supervisor_overhead
//! ```
//!
//! `CORRAL_BENCH_ITERATIONS` overrides the number of timed 1-token requests per path.

// A bench's root is its crate root, so its modules need their path spelled out.
#[path = "supervisor_overhead/direct.rs"]
mod direct;
#[path = "supervisor_overhead/through_corral.rs"]
mod through_corral;

use std::thread;
use std::time::Duration;

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use corral_tests::bench;
use tokio::runtime::Runtime;

use direct::Direct;
use through_corral::Corral;

const DEFAULT_ITERATIONS: usize = 200;
/// Untimed requests per path first: the first ones pay for lazy loading and cold caches.
const WARMUP: usize = 10;
const STREAM_MAX_TOKENS: u32 = 256;
const STREAM_REPEATS: usize = 5;
const PROMPT: &str = "Once upon a time";
const SIZES: [Size; 2] = [Size::Tiny, Size::Small];
/// Startup, drain and any single request; generous, since the machine may be busy.
const PATIENCE: Duration = Duration::from_secs(60);

fn main() {
    let iterations = bench::iterations(DEFAULT_ITERATIONS);
    let models = generate_models();
    let corral = Corral::start(models.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    let direct = runtime.block_on(Direct::launch(models.path()));

    let latency = measure_latency(&corral, &direct, &runtime, iterations);
    let throughput: Vec<_> = SIZES
        .iter()
        .map(|&size| measure_throughput(&corral, &direct, &runtime, size))
        .collect();
    runtime.block_on(direct.stop());
    drop(corral);

    let cores = thread::available_parallelism().map_or(0, usize::from);
    println!("cores available: {cores}");
    println!(
        "\n1-token completion, {iterations} requests per path ({} model)\n",
        Size::Tiny.name()
    );
    latency.print();
    println!("\nstreamed completion, max_tokens {STREAM_MAX_TOKENS}, median of {STREAM_REPEATS}\n");
    print_throughput(&throughput);
}

/// One fixture per size, in subdirectories named after it, which become the model ids.
fn generate_models() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory for the models");
    for size in SIZES {
        let options = FixtureOptions {
            size,
            arch: Arch::Llama,
            dtype: Dtype::F32,
            quantize: None,
            format: Format::Safetensors,
        };
        corral_fixture::generate(&options, &dir.path().join(size.name()))
            .expect("generating the fixture model");
    }
    dir
}

/// One generation as timed by the caller: the whole request, and the decode part of it (first
/// text to the end), with the tokens it produced.
struct Timed {
    total: Duration,
    decode: Duration,
    completion_tokens: u64,
}

impl Timed {
    fn tokens_per_second(&self) -> f64 {
        self.completion_tokens as f64 / self.decode.as_secs_f64()
    }
}

struct Latency {
    corral: Vec<Duration>,
    direct: Vec<Duration>,
}

fn measure_latency(corral: &Corral, direct: &Direct, runtime: &Runtime, n: usize) -> Latency {
    let model = Size::Tiny.name();
    let mut latency = Latency {
        corral: Vec::with_capacity(n),
        direct: Vec::with_capacity(n),
    };
    for round in 0..WARMUP + n {
        let through_corral = corral.complete(model, 1);
        let straight = runtime.block_on(direct.generate(model, 1));
        assert_eq!(straight.completion_tokens, 1);
        if round >= WARMUP {
            latency.corral.push(through_corral);
            latency.direct.push(straight.total);
        }
    }
    latency
}

impl Latency {
    fn print(mut self) {
        self.corral.sort_unstable();
        self.direct.sort_unstable();
        let (direct50, direct99) = (percentile(&self.direct, 50), percentile(&self.direct, 99));
        let (corral50, corral99) = (percentile(&self.corral, 50), percentile(&self.corral, 99));
        println!("| path | p50 ms | p99 ms | added p50 | added p99 |");
        println!("|---|---:|---:|---:|---:|");
        println!("| direct (worker socket) | {direct50:.3} | {direct99:.3} | | |");
        println!(
            "| corral (HTTP) | {corral50:.3} | {corral99:.3} | {:+.3} | {:+.3} |",
            corral50 - direct50,
            corral99 - direct99
        );
    }
}

/// Nearest-rank percentile of sorted samples, in milliseconds.
fn percentile(sorted: &[Duration], p: usize) -> f64 {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank - 1].as_secs_f64() * 1e3
}

struct Throughput {
    size: Size,
    completion_tokens: u64,
    corral: f64,
    direct: f64,
}

fn measure_throughput(
    corral: &Corral,
    direct: &Direct,
    runtime: &Runtime,
    size: Size,
) -> Throughput {
    let model = size.name();
    corral.stream(model, STREAM_MAX_TOKENS);
    runtime.block_on(direct.generate(model, STREAM_MAX_TOKENS));
    let (mut through_corral, mut straight) = (Vec::new(), Vec::new());
    for _ in 0..STREAM_REPEATS {
        through_corral.push(corral.stream(model, STREAM_MAX_TOKENS));
        straight.push(runtime.block_on(direct.generate(model, STREAM_MAX_TOKENS)));
    }
    // Temperature 0 on both paths: every run must produce the same tokens.
    let completion_tokens = straight[0].completion_tokens;
    assert!(
        through_corral
            .iter()
            .chain(&straight)
            .all(|run| run.completion_tokens == completion_tokens),
        "the runs on {model} differ in length"
    );
    Throughput {
        size,
        completion_tokens,
        corral: median_tokens_per_second(&through_corral),
        direct: median_tokens_per_second(&straight),
    }
}

fn median_tokens_per_second(runs: &[Timed]) -> f64 {
    let mut rates: Vec<f64> = runs.iter().map(Timed::tokens_per_second).collect();
    rates.sort_unstable_by(f64::total_cmp);
    rates[rates.len() / 2]
}

fn print_throughput(rows: &[Throughput]) {
    println!("| model | corral tok/s | direct tok/s | ratio |");
    println!("|---|---:|---:|---:|");
    for row in rows {
        println!(
            "| {} ({} tokens) | {:.1} | {:.1} | {:.3} |",
            row.size.name(),
            row.completion_tokens,
            row.corral,
            row.direct,
            row.corral / row.direct
        );
    }
}
