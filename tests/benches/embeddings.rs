//! Embedding and rerank throughput through corral's HTTP API, beside sentence-transformers.
//!
//! all-MiniLM-L6-v2 (`cargo xtask setup` fetches it) embeds short sentences through
//! `POST /v1/embeddings` at 1, 32 and 256 inputs per request, one request at a time; the same
//! batches go through `SentenceTransformer.encode` in a Python subprocess in the same run, with
//! the reference virtualenv `cargo xtask reference` builds (`build/reference/embedding-venv`;
//! without it that column is skipped with a note). Both count tokens with `[CLS]` and `[SEP]`.
//! Then the MiniLM-size fixture cross-encoder (`corral fixture --size small --arch bert --task
//! rerank`) scores 32 documents per `POST /v1/rerank`. Last, the embedding worker's footprint
//! (RSS on Linux) right after it loaded and answered one sentence, its peak while embedding the
//! 256-sentence batches (sampled every 10 ms), and once they are done.
//!
//! Run it with release binaries in place (plain cargo cannot link MLX on Linux):
//!
//! ```text
//! cargo xtask cargo build --release --bins
//! cargo xtask cargo bench -p corral-tests --bench embeddings
//! ```
//!
//! `CORRAL_BENCH_ITERATIONS` sets how many times each case embeds 256 sentences (default 3).
//! Only 127.0.0.1 is contacted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use corral::memory::process_footprint;
use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size, Task};
use corral_tests::bench::{self, CorralServer};
use corral_tests::minilm_model;
use serde_json::{Value, json};

const DEFAULT_ITERATIONS: usize = 3;
const MINILM: &str = "all-MiniLM-L6-v2";
const RERANKER: &str = "minilm-size-reranker";
const BATCHES: [usize; 3] = [1, 32, 256];
/// Sentences each case embeds per iteration: 256 requests of one, 8 of 32, 1 of 256.
const SENTENCES_PER_ITERATION: usize = 256;
const RERANK_DOCUMENTS: usize = 32;
/// Rerank requests per iteration.
const RERANK_REQUESTS: usize = 4;
const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// Startup, shutdown and any single request; generous, since the machine may be busy.
const PATIENCE: Duration = Duration::from_secs(300);
const MIB: f64 = (1u64 << 20) as f64;

/// One case's totals, from either side.
struct Throughput {
    seconds: f64,
    embeddings: usize,
    tokens: u64,
}

impl Throughput {
    fn per_second(&self) -> (f64, f64) {
        (
            self.embeddings as f64 / self.seconds,
            self.tokens as f64 / self.seconds,
        )
    }
}

struct Footprints {
    idle: u64,
    peak: u64,
    after: u64,
}

fn main() {
    let iterations = bench::iterations(DEFAULT_ITERATIONS);
    let sentences = short_sentences();
    let models = tempfile::tempdir().expect("temporary models directory");
    let state = tempfile::tempdir().expect("temporary state directory");
    std::os::unix::fs::symlink(minilm_model(), models.path().join(MINILM))
        .expect("linking all-MiniLM-L6-v2 into the models directory");
    let reranker = FixtureOptions {
        size: Size::Small,
        arch: Arch::Bert,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    corral_fixture::generate_for_task(&reranker, Task::Rerank, &models.path().join(RERANKER))
        .expect("generating the cross-encoder fixture");

    let corral = CorralServer::start(models.path(), state.path(), &[], PATIENCE);
    let (corral_cases, footprints) = measure_corral(&corral, &sentences, iterations);
    let rerank = measure_rerank(&corral, &sentences, iterations);
    drop(corral);
    let reference = measure_sentence_transformers(&sentences, iterations);

    let cores = thread::available_parallelism().map_or(0, usize::from);
    println!("cores available: {cores}");
    println!(
        "\n{MINILM}, short sentences ({:.1} tokens each on average), one request at a time, \
         {iterations} x {SENTENCES_PER_ITERATION} sentences per case\n",
        corral_cases[0].tokens as f64 / corral_cases[0].embeddings as f64
    );
    print_embeddings(&corral_cases, &reference);
    let (pairs, tokens) = rerank.per_second();
    println!(
        "\n{RERANKER} (fixture, all-MiniLM-L6-v2's shapes): {RERANK_DOCUMENTS} documents per \
         request, {} requests\n\n  corral /v1/rerank: {pairs:.1} pairs/s, {tokens:.0} tokens/s",
        rerank.embeddings / RERANK_DOCUMENTS
    );
    println!(
        "\n{MINILM} worker footprint (RSS): {:.0} MiB idle after loading, {:.0} MiB peak while \
         embedding batches of 256, {:.0} MiB after",
        footprints.idle as f64 / MIB,
        footprints.peak as f64 / MIB,
        footprints.after as f64 / MIB
    );
}

/// Short, distinct sentences: every subject with every verb phrase.
fn short_sentences() -> Vec<String> {
    let subjects = [
        "The old fisherman",
        "A curious child",
        "My neighbour's cat",
        "The city council",
        "An engineer from Lyon",
        "The night train",
        "Our small bakery",
        "A quiet student",
        "The football team",
        "This tiny robot",
        "The river",
        "A famous painter",
        "The new library",
        "Every morning bus",
        "The weather service",
        "A lost tourist",
    ];
    let predicates = [
        "waited patiently by the harbour.",
        "opened a letter from home.",
        "forgot the keys again.",
        "announced a change of plans.",
        "sold out before noon.",
        "repaired the broken fence.",
        "crossed the bridge at dawn.",
        "asked for directions to the museum.",
        "won the match in extra time.",
        "predicted heavy rain tomorrow.",
        "painted the walls bright yellow.",
        "climbed the hill behind the school.",
        "counted the boats in the bay.",
        "read every book on the shelf.",
        "arrived ten minutes late.",
        "found a coin under the bench.",
    ];
    subjects
        .iter()
        .flat_map(|s| predicates.iter().map(move |p| format!("{s} {p}")))
        .collect()
}

fn batch_of(sentences: &[String], start: usize, size: usize) -> Vec<&str> {
    (0..size)
        .map(|i| sentences[(start + i) % sentences.len()].as_str())
        .collect()
}

fn embed(corral: &CorralServer, inputs: &[&str]) -> u64 {
    let body: Value = corral
        .post(
            "/v1/embeddings",
            &json!({"model": MINILM, "input": inputs, "encoding_format": "base64"}),
        )
        .json()
        .expect("an embeddings response");
    let count = body["data"].as_array().map_or(0, Vec::len);
    assert_eq!(count, inputs.len(), "one embedding per input");
    body["usage"]["prompt_tokens"]
        .as_u64()
        .expect("usage.prompt_tokens")
}

fn worker_pid(corral: &CorralServer, model: &str) -> u32 {
    let workers = corral.get_json("/admin/workers");
    workers["data"]
        .as_array()
        .and_then(|rows| rows.iter().find(|row| row["model"] == model))
        .and_then(|row| row["pid"].as_u64())
        .and_then(|pid| u32::try_from(pid).ok())
        .unwrap_or_else(|| panic!("no running worker for {model} in {workers}"))
}

fn footprint(pid: u32) -> u64 {
    process_footprint(pid).expect("reading the worker's footprint")
}

fn measure_corral(
    corral: &CorralServer,
    sentences: &[String],
    iterations: usize,
) -> (Vec<Throughput>, Footprints) {
    embed(corral, &batch_of(sentences, 0, 1));
    let pid = worker_pid(corral, MINILM);
    let idle = footprint(pid);
    let mut cases = Vec::new();
    let mut peak = idle;
    for batch in BATCHES {
        // One warm-up request of this size: MLX compiles and allocates per shape.
        embed(corral, &batch_of(sentences, 0, batch));
        let sampler = (batch == BATCHES[BATCHES.len() - 1]).then(|| Sampler::start(pid));
        let requests = iterations * SENTENCES_PER_ITERATION / batch;
        let started = Instant::now();
        let tokens: u64 = (0..requests)
            .map(|r| embed(corral, &batch_of(sentences, r * batch, batch)))
            .sum();
        let seconds = started.elapsed().as_secs_f64();
        if let Some(sampler) = sampler {
            peak = peak.max(sampler.stop());
        }
        cases.push(Throughput {
            seconds,
            embeddings: requests * batch,
            tokens,
        });
    }
    let after = footprint(pid);
    (cases, Footprints { idle, peak, after })
}

fn measure_rerank(corral: &CorralServer, sentences: &[String], iterations: usize) -> Throughput {
    let rerank = |request: usize| -> u64 {
        let documents = batch_of(sentences, request * RERANK_DOCUMENTS, RERANK_DOCUMENTS);
        let body: Value = corral
            .post(
                "/v1/rerank",
                &json!({
                    "model": RERANKER,
                    "query": "Who was waiting at the harbour this morning?",
                    "documents": documents,
                }),
            )
            .json()
            .expect("a rerank response");
        let count = body["results"].as_array().map_or(0, Vec::len);
        assert_eq!(count, RERANK_DOCUMENTS, "one result per document");
        body["usage"]["prompt_tokens"]
            .as_u64()
            .expect("usage.prompt_tokens")
    };
    rerank(0);
    let requests = iterations * RERANK_REQUESTS;
    let started = Instant::now();
    let tokens = (0..requests).map(rerank).sum();
    Throughput {
        seconds: started.elapsed().as_secs_f64(),
        embeddings: requests * RERANK_DOCUMENTS,
        tokens,
    }
}

/// The worker's highest footprint, sampled on a thread until stopped.
struct Sampler {
    running: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: thread::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let running = Arc::new(AtomicBool::new(true));
        let peak = Arc::new(AtomicU64::new(0));
        let thread = {
            let (running, peak) = (Arc::clone(&running), Arc::clone(&peak));
            thread::spawn(move || {
                while running.load(Ordering::Relaxed) {
                    if let Ok(bytes) = process_footprint(pid) {
                        peak.fetch_max(bytes, Ordering::Relaxed);
                    }
                    thread::sleep(SAMPLE_EVERY);
                }
            })
        };
        Self {
            running,
            peak,
            thread,
        }
    }

    fn stop(self) -> u64 {
        self.running.store(false, Ordering::Relaxed);
        self.thread.join().expect("the footprint sampler panicked");
        self.peak.load(Ordering::Relaxed)
    }
}

/// The reference venv's Python, if `cargo xtask reference` has built it.
fn reference_python() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    let python = root.join("build/reference/embedding-venv/bin/python");
    python.exists().then_some(python)
}

/// sentence-transformers' numbers for the same cases, and the versions and threads it ran with;
/// `Err` says why there are none.
fn measure_sentence_transformers(
    sentences: &[String],
    iterations: usize,
) -> Result<(Vec<Throughput>, String), String> {
    let python = reference_python()
        .ok_or("build/reference/embedding-venv is missing (`cargo xtask reference` builds it)")?;
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/embeddings_sentence_transformers.py");
    let cases: Vec<Value> = BATCHES
        .iter()
        .map(|&batch| json!({"batch": batch, "requests": iterations * SENTENCES_PER_ITERATION / batch}))
        .collect();
    let job = json!({"model": minilm_model(), "sentences": sentences, "cases": cases});
    let mut child = Command::new(&python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|error| format!("starting {}: {error}", python.display()))?;
    {
        let mut stdin = child.stdin.take().ok_or("no stdin for the Python bench")?;
        serde_json::to_writer(&mut stdin, &job).map_err(|error| error.to_string())?;
    }
    let output = child
        .wait_with_output()
        .map_err(|error| format!("waiting for the Python bench: {error}"))?;
    if !output.status.success() {
        return Err(format!("the Python bench failed with {}", output.status));
    }
    let result: Value = serde_json::from_slice(&output.stdout)
        .map_err(|error| format!("the Python bench printed no JSON: {error}"))?;
    let throughputs = result["cases"]
        .as_array()
        .ok_or("no cases in the Python bench's output")?
        .iter()
        .map(|case| Throughput {
            seconds: case["seconds"].as_f64().unwrap_or(f64::NAN),
            embeddings: case["embeddings"].as_u64().unwrap_or(0) as usize,
            tokens: case["tokens"].as_u64().unwrap_or(0),
        })
        .collect();
    let about = format!(
        "sentence-transformers {}, torch {}, {} threads",
        result["versions"]["sentence-transformers"]
            .as_str()
            .unwrap_or("?"),
        result["versions"]["torch"].as_str().unwrap_or("?"),
        result["threads"]
    );
    Ok((throughputs, about))
}

fn print_embeddings(corral: &[Throughput], reference: &Result<(Vec<Throughput>, String), String>) {
    println!(
        "  {:>5} | {:>14} {:>12} | {:>14} {:>12} | {:>7}",
        "batch", "corral emb/s", "tokens/s", "s-t emb/s", "tokens/s", "ratio"
    );
    for (index, (batch, case)) in BATCHES.iter().zip(corral).enumerate() {
        let (embeddings, tokens) = case.per_second();
        let theirs = reference
            .as_ref()
            .ok()
            .and_then(|(cases, _)| cases.get(index))
            .map(Throughput::per_second);
        match theirs {
            Some((their_embeddings, their_tokens)) => println!(
                "  {batch:>5} | {embeddings:>14.1} {tokens:>12.0} | {their_embeddings:>14.1} \
                 {their_tokens:>12.0} | {:>6.2}x",
                embeddings / their_embeddings
            ),
            None => println!(
                "  {batch:>5} | {embeddings:>14.1} {tokens:>12.0} | {:>14} {:>12} | {:>7}",
                "-", "-", "-"
            ),
        }
    }
    match reference {
        Ok((_, about)) => println!("\n  (s-t: {about}; ratio: corral's embeddings/s over theirs)"),
        Err(why) => println!("\n  sentence-transformers skipped: {why}"),
    }
}
