//! What one decode step costs as the batch grows: the forward pass of one new token for each of
//! B sequences (each with ~100 cached positions) and the copy of their logits to the host, on
//! the tiny and small f32 fixtures. Median of 30 steps after 5 warm-up steps.
//!
//! ```text
//! cargo xtask cargo bench -p corral-worker --bench decode_step
//! ```

use std::time::{Duration, Instant};

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use corral_worker::model::{KvCache, Model, Segment};

const BATCHES: [usize; 6] = [1, 2, 4, 8, 16, 32];
const PROMPT: usize = 100;
const WARMUP: usize = 5;
const STEPS: usize = 30;

fn main() {
    println!("| model | rows | step ms p50 | per row ms | tok/s |");
    println!("|---|---|---|---|---|");
    for size in [Size::Tiny, Size::Small] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let options = FixtureOptions {
            size,
            arch: Arch::Llama,
            dtype: Dtype::F32,
            quantize: None,
            format: Format::Safetensors,
        };
        corral_fixture::generate(&options, dir.path()).expect("the fixture");
        let model = Model::load(dir.path()).expect("the fixture loads");
        for rows in BATCHES {
            let step = median_step(&model, rows);
            let ms = step.as_secs_f64() * 1e3;
            println!(
                "| {size:?} | {rows} | {ms:.2} | {:.2} | {:.0} |",
                ms / rows as f64,
                rows as f64 / step.as_secs_f64()
            );
        }
    }
}

fn median_step(model: &Model, rows: usize) -> Duration {
    let mut caches: Vec<Vec<KvCache>> = (0..rows)
        .map(|row| {
            let mut cache = model.new_cache();
            let prompt: Vec<u32> = (0..PROMPT as u32 + row as u32)
                .map(|t| t % 500 + 1)
                .collect();
            model
                .hidden_states(&prompt, &mut cache)
                .and_then(|hidden| hidden.eval())
                .expect("prefill");
            cache
        })
        .collect();
    let tokens: Vec<u32> = (0..rows as u32).map(|row| row + 7).collect();
    let mut times = Vec::new();
    for step in 0..WARMUP + STEPS {
        let started = Instant::now();
        let mut segments: Vec<Segment> = caches
            .iter_mut()
            .zip(&tokens)
            .map(|(cache, token)| Segment {
                tokens: std::slice::from_ref(token),
                cache: cache.as_mut_slice(),
                embedded: Vec::new(),
            })
            .collect();
        let logits = model
            .packed_hidden_states(&mut segments)
            .and_then(|hidden| model.logits(&hidden))
            .and_then(|logits| logits.as_dtype(mlx_rs::Dtype::Float32))
            .expect("a decode step");
        logits.eval().expect("evaluating the step");
        std::hint::black_box(logits.as_slice::<f32>());
        if step >= WARMUP {
            times.push(started.elapsed());
        }
    }
    times.sort();
    times[times.len() / 2]
}
