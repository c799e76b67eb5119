//! What constrained decoding costs per request and per token: grammar compile time, the first
//! mask (llguidance builds its lexer states lazily, so the first step pays for some of them),
//! and the mask per generated token (llguidance's mask plus applying it to the logits), median
//! and 90th percentile, on two vocabularies:
//! - the fixture's byte-level BPE (about a thousand tokens, from its `tokenizer.json`);
//! - SmolLM2-135M-Instruct's (49,152 tokens), rebuilt from its GGUF's metadata, as the worker
//!   loads it. `cargo xtask setup` fetches the file; `CORRAL_BENCH_GGUF` names another one.
//!
//! Tokens come from a uniform draw among the allowed ones (random logits, masked, argmax), 20
//! seeds per row, each generation cut at 400 tokens. Only the `mask` call is timed.
//!
//! ```text
//! cargo xtask cargo bench -p corral-worker --bench constraint_mask
//! ```

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use corral_worker::constraint::{Constraint, ConstraintFactory, GrammarSpec, ToolCallChoice};
use corral_worker::gguf::{GgufHeader, check};
use corral_worker::tools::ToolFormat;
use serde_json::{Value, json};
use tokenizers::Tokenizer;

const SEEDS: u64 = 20;
const MAX_TOKENS: usize = 400;
const COMPILES: usize = 20;

fn main() {
    let mut vocabularies = vec![fixture()];
    match smollm2() {
        Some(vocabulary) => vocabularies.push(vocabulary),
        None => {
            eprintln!("SmolLM2's GGUF not found: run `cargo xtask setup` or set CORRAL_BENCH_GGUF")
        }
    }
    println!(
        "| vocabulary | tokens | factory | grammar | compile p50 | first mask | mask p50 | mask p90 | mask max | masks |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for vocabulary in &vocabularies {
        let started = Instant::now();
        let factory =
            ConstraintFactory::new(&vocabulary.tokenizer, vocabulary.n_vocab, &vocabulary.eos)
                .expect("the vocabulary is supported");
        let built = started.elapsed();
        for (grammar, spec) in grammars() {
            let row = measure(&factory, &vocabulary.eos, &spec);
            println!(
                "| {} | {} | {} | {grammar} | {} | {} | {} | {} | {} | {} |",
                vocabulary.name,
                vocabulary.n_vocab,
                ms(built),
                ms(row.compile),
                us(row.first_mask),
                us(percentile(&row.masks, 50)),
                us(percentile(&row.masks, 90)),
                us(percentile(&row.masks, 100)),
                row.masks.len(),
            );
        }
    }
}

struct Vocabulary {
    name: &'static str,
    tokenizer: Tokenizer,
    n_vocab: usize,
    eos: BTreeSet<u32>,
}

impl Vocabulary {
    fn new(name: &'static str, tokenizer: Tokenizer, n_vocab: usize) -> Self {
        let eos = ["<|im_end|>", "<|endoftext|>"]
            .iter()
            .filter_map(|token| tokenizer.token_to_id(token))
            .collect();
        Self {
            name,
            tokenizer,
            n_vocab,
            eos,
        }
    }
}

fn fixture() -> Vocabulary {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = FixtureOptions {
        size: Size::Tiny,
        arch: Arch::Qwen2,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    let summary = corral_fixture::generate(&options, dir.path()).expect("the fixture");
    let tokenizer =
        Tokenizer::from_file(dir.path().join("tokenizer.json")).expect("the fixture's tokenizer");
    Vocabulary::new("fixture", tokenizer, summary.vocab_size)
}

fn smollm2() -> Option<Vocabulary> {
    let path = std::env::var_os("CORRAL_BENCH_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../build/models/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    let header = GgufHeader::read(&path).ok()?;
    let (config, tokenizer) = check(&header).expect("a servable GGUF");
    Some(Vocabulary::new(
        "SmolLM2-135M (GGUF)",
        tokenizer,
        config.vocab_size as usize,
    ))
}

fn weather() -> Value {
    json!({
        "type": "object",
        "properties": {
            "location": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "temperature": {"type": "number"},
        },
        "required": ["location", "unit", "temperature"],
    })
}

fn grammars() -> Vec<(&'static str, GrammarSpec)> {
    let tool =
        json!({"type": "function", "function": {"name": "get_weather", "parameters": weather()}});
    vec![
        (
            "json_schema (weather)",
            GrammarSpec::JsonSchema {
                schema: weather(),
                strict: true,
            },
        ),
        (
            "Hermes tool call (weather)",
            GrammarSpec::ToolCalls {
                format: ToolFormat::Hermes,
                tools: vec![tool],
                choice: ToolCallChoice::Required,
                parallel: false,
            },
        ),
    ]
}

struct Row {
    compile: Duration,
    first_mask: Duration,
    /// Every mask after the first.
    masks: Vec<Duration>,
}

fn measure(factory: &ConstraintFactory, eos: &BTreeSet<u32>, spec: &GrammarSpec) -> Row {
    let mut compiles: Vec<Duration> = (0..COMPILES)
        .map(|_| {
            let started = Instant::now();
            Constraint::compile(factory, spec).expect("the grammar compiles");
            started.elapsed()
        })
        .collect();
    let mut first_masks = Vec::new();
    let mut masks = Vec::new();
    let mut logits = vec![0.0f32; factory.n_vocab()];
    for seed in 0..SEEDS {
        let mut constraint = Constraint::compile(factory, spec).expect("the grammar compiles");
        let mut rng = Rng(seed);
        for step in 0..MAX_TOKENS {
            if constraint.is_finished() {
                break;
            }
            logits.iter_mut().for_each(|logit| *logit = rng.logit());
            let started = Instant::now();
            constraint.mask(&mut logits).expect("a mask");
            let took = started.elapsed();
            if step == 0 {
                first_masks.push(took);
            } else {
                masks.push(took);
            }
            let token = argmax(&logits);
            if eos.contains(&token) {
                break;
            }
            constraint.accept(token).expect("an allowed token");
        }
    }
    compiles.sort();
    masks.sort();
    first_masks.sort();
    Row {
        compile: percentile(&compiles, 50),
        first_mask: percentile(&first_masks, 50),
        masks,
    }
}

/// splitmix64, so every run draws the same tokens.
struct Rng(u64);

impl Rng {
    fn logit(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (index, logit) in logits.iter().enumerate() {
        if *logit > logits[best] {
            best = index;
        }
    }
    best as u32
}

/// Of sorted `values`.
fn percentile(values: &[Duration], percent: usize) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values[(values.len() - 1) * percent / 100]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

fn us(duration: Duration) -> String {
    format!("{:.0} µs", duration.as_secs_f64() * 1e6)
}
