//! Embedding and rerank throughput through the encoder engine (tokenization, length buckets,
//! padded batches, pooling, the copy to the host): all-MiniLM-L6-v2 (`cargo xtask setup` fetches
//! it) at 1, 32 and 256 short sentences per request, and a MiniLM-size fixture cross-encoder at
//! 1, 32 and 256 pairs; MLX's memory once loaded (idle) and after the runs (peak). Median of 10
//! requests after 2 warm-up requests.
//!
//! ```text
//! cargo xtask cargo bench -p corral-worker --bench embed_throughput
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size, Task};
use corral_ipc::{EmbedInput, EmbedRequest, FromWorker, RerankRequest};
use corral_worker::embedding::engine::{EncoderEngine, Work};

const BATCHES: [usize; 3] = [1, 32, 256];
const WARMUP: usize = 2;
const RUNS: usize = 10;

const SENTENCES: [&str; 8] = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the street corner.",
    "Embeddings map text to vectors.",
    "The stock market fell sharply on Tuesday.",
    "Water most indoor plants when the soil feels dry.",
    "Our team won the championship after a shootout.",
    "The recipe calls for two cups of flour.",
    "The new smartphone has a faster processor.",
];

fn main() {
    println!("| model | request | items/s | tokens/s | request ms p50 |");
    println!("|---|---|---|---|---|");
    let minilm = Path::new(env!("CARGO_MANIFEST_DIR")).join("../build/models/all-MiniLM-L6-v2");
    if minilm.join("model.safetensors").is_file() {
        measure("all-MiniLM-L6-v2", minilm, |count| {
            Work::Embed(EmbedRequest {
                inputs: (0..count)
                    .map(|i| EmbedInput::Text(SENTENCES[i % SENTENCES.len()].to_owned()))
                    .collect(),
                truncate: false,
                dimensions: None,
                prompt_name: None,
            })
        });
    } else {
        println!("(all-MiniLM-L6-v2 skipped: {} is absent)", minilm.display());
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = FixtureOptions {
        size: Size::Small,
        arch: Arch::Bert,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    corral_fixture::generate_for_task(&options, Task::Rerank, dir.path()).expect("the fixture");
    measure(
        "cross-encoder (small fixture)",
        dir.path().to_path_buf(),
        |count| {
            Work::Rerank(RerankRequest {
                query: "How do I keep my houseplants alive?".to_owned(),
                documents: (0..count)
                    .map(|i| SENTENCES[i % SENTENCES.len()].to_owned())
                    .collect(),
                truncate: false,
            })
        },
    );
}

fn measure(name: &str, dir: PathBuf, work: impl Fn(usize) -> Work) {
    let engine = EncoderEngine::start(dir).expect("the model loads");
    let idle = engine.memory().active;
    for count in BATCHES {
        let mut times = Vec::new();
        let mut tokens = 0;
        for run in 0..WARMUP + RUNS {
            let started = Instant::now();
            let answer = engine
                .run(run as u64, work(count))
                .expect("the engine answers");
            let elapsed = started.elapsed();
            tokens = match answer {
                FromWorker::Embeddings { prompt_tokens, .. }
                | FromWorker::Scores { prompt_tokens, .. } => prompt_tokens,
                other => panic!("unexpected answer {other:?}"),
            };
            if run >= WARMUP {
                times.push(elapsed);
            }
        }
        times.sort();
        let median: Duration = times[times.len() / 2];
        let seconds = median.as_secs_f64();
        println!(
            "| {name} | {count} | {:.0} | {:.0} | {:.2} |",
            count as f64 / seconds,
            f64::from(tokens) / seconds,
            seconds * 1e3
        );
    }
    let memory = engine.memory();
    println!(
        "\n{name}: MLX active memory {:.1} MiB idle, peak {:.1} MiB\n",
        idle as f64 / (1 << 20) as f64,
        memory.peak as f64 / (1 << 20) as f64
    );
}
