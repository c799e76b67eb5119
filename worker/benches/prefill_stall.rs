//! How long a long prompt arriving holds up the streams already running: one stream decodes on
//! the tiny f32 fixture while an 8,000-token prompt is submitted beside it. The table gives the
//! stream's time between tokens before the prompt came and while it was prefilled (from its
//! submission to its first token, read at the stream's next token), the longest gap, and the
//! long prompt's time to first token, for several prefill chunk sizes (8,192 is one pass: no
//! chunking).
//!
//! ```text
//! cargo xtask cargo bench -p corral-worker --bench prefill_stall
//! ```

use std::time::{Duration, Instant};

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use corral_worker::batch::BatchLimits;
use corral_worker::engine::{Engine, EngineOptions, Submission};
use corral_worker::generation::{Event, GenerateRequest, Prompt};

const LONG_PROMPT: usize = 8000;
const CHUNKS: [usize; 4] = [256, 512, 2048, 8192];
/// Tokens the running stream makes before the long prompt arrives.
const BEFORE: usize = 40;

fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = FixtureOptions {
        size: Size::Tiny,
        arch: Arch::Llama,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    corral_fixture::generate(&options, dir.path()).expect("the fixture");
    println!(
        "| prefill chunk | gap before p50 ms | gap during p50 ms | gap during max ms | long prompt TTFT ms |"
    );
    println!("|---|---|---|---|---|");
    for chunk in CHUNKS {
        let engine = Engine::start_with(
            dir.path().to_path_buf(),
            EngineOptions {
                batch: BatchLimits {
                    prefill_chunk: chunk,
                    ..BatchLimits::default()
                },
                ..EngineOptions::default()
            },
        )
        .expect("the engine starts");
        let row = measure(&engine);
        println!(
            "| {chunk} | {:.1} | {:.1} | {:.1} | {:.0} |",
            ms(percentile(&row.before, 50)),
            ms(percentile(&row.during, 50)),
            ms(percentile(&row.during, 100)),
            ms(row.long_ttft),
        );
    }
}

struct Row {
    before: Vec<Duration>,
    during: Vec<Duration>,
    long_ttft: Duration,
}

fn measure(engine: &Engine) -> Row {
    let stream = engine
        .submit(GenerateRequest::greedy(
            Prompt::Tokens((1..100).collect()),
            100_000,
        ))
        .expect("the stream is queued");
    let mut last = next_token(&stream);
    let mut before = Vec::new();
    while before.len() < BEFORE {
        let now = next_token(&stream);
        before.push(now - last);
        last = now;
    }
    let long_prompt: Vec<u32> = (0..LONG_PROMPT as u32).map(|i| i % 900 + 1).collect();
    let submitted = Instant::now();
    let long = engine
        .submit(GenerateRequest::greedy(Prompt::Tokens(long_prompt), 1))
        .expect("the long prompt is queued");
    let mut during = Vec::new();
    let long_ttft = loop {
        let now = next_token(&stream);
        during.push(now - last);
        last = now;
        if let Some(done) = first_token(&long) {
            break done - submitted;
        }
    };
    stream
        .cancel
        .store(true, std::sync::atomic::Ordering::Relaxed);
    while stream.events.recv().is_ok() {}
    Row {
        before,
        during,
        long_ttft,
    }
}

/// Waits for the stream's next delta; returns when it came.
fn next_token(submission: &Submission) -> Instant {
    loop {
        match submission.events.recv() {
            Ok(Ok(Event::Delta { .. })) => return Instant::now(),
            Ok(Ok(_)) => continue,
            Ok(Err(error)) => panic!("the stream failed: {error}"),
            Err(_) => panic!("the stream ended"),
        }
    }
}

/// When the long prompt's first token came, if it has by now.
fn first_token(submission: &Submission) -> Option<Instant> {
    while let Ok(event) = submission.events.try_recv() {
        if let Ok(Event::Delta { .. } | Event::Done { .. }) = event {
            return Some(Instant::now());
        }
    }
    None
}

fn percentile(values: &[Duration], at: usize) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted[(sorted.len() - 1) * at / 100]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
