//! What constrained decoding costs during real decoding: the same chat prompt decoded for 48
//! tokens unconstrained, under a JSON schema and as a JSON object, on the `small` and `tiny` Llama
//! fixtures (f32) loaded in this process. The difference in decode time per token against the
//! unconstrained runs is what llguidance's mask (and applying it to the logits) adds to each
//! step; `worker/benches/constraint_mask.rs` times the mask alone, without a model.
//!
//! Every request runs all 48 tokens, greedily (the bench checks): a stop string that never
//! matches, and for the constrained modes a grammar still open after 48 tokens (the fixtures'
//! random weights stay inside the first string). After one untimed warm-up request the modes run
//! interleaved, one request each per pass, each mode taking each place in a pass in turn. Decode
//! times are the worker's own (`Timings::decode` in `Event::Done`); the table shows medians over
//! the passes, and the mask overhead is the median of each pass's difference to its own
//! unconstrained request, so drift between passes (other work on a shared machine) cancels out.
//! What remains of that noise can exceed the mask itself, so each constrained request's tokens
//! are also replayed through the constraint alone (mask and accept, no model): back to back, and
//! with the CPU caches evicted before each step, as the forward pass evicts them in a decode.
//!
//! The model's `ConstraintFactory` (llguidance's view of the vocabulary) is built lazily by the
//! first constrained request: the bench times that request against the later ones of its mode,
//! and `LoadedModel::constraints()` itself on fresh loads of the model.
//!
//! ```text
//! cargo xtask cargo bench -p corral-tests --bench constrained_decode
//! ```
//!
//! `CORRAL_BENCH_ITERATIONS` sets the passes on `small` (default 5); `tiny` runs eight times as
//! many. The temporary model directories are removed at the end.

use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::{Duration, Instant};

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use corral_ipc::{OutputFormat, ToolChoice};
use corral_tests::bench;
use corral_worker::constraint::{Constraint, GrammarSpec};
use corral_worker::generation::{Event, FinishReason, GenerateRequest, OutputOptions, Prompt};
use corral_worker::loaded::LoadedModel;
use corral_worker::one_shot::{Limits, generate};
use corral_worker::sampling::SamplingParams;
use serde_json::{Value, json};

const DEFAULT_ITERATIONS: usize = 5;
const MAX_TOKENS: usize = 48;
/// A stop string the fixtures never write, so the text side of a request costs the same in
/// every mode and nothing ends it early.
const NEVER: &str = "\u{1}never\u{1}";
/// Replays of each constrained mode's tokens through a constraint alone.
const REPLAYS: usize = 5;
/// More than the last-level cache of the machines this runs on.
const EVICTION_BYTES: usize = 64 << 20;
/// Fresh loads of the model whose `LoadedModel::constraints()` is timed.
const FACTORY_BUILDS: usize = 5;
/// `tiny`'s requests take a fraction of a second, and its per-token differences are small
/// against the machine's noise: it runs this many times the passes.
const TINY_PASSES: usize = 8;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Unconstrained,
    JsonSchema,
    JsonObject,
}

const MODES: [Mode; 3] = [Mode::Unconstrained, Mode::JsonSchema, Mode::JsonObject];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Unconstrained => "unconstrained",
            Mode::JsonSchema => "json_schema (person)",
            Mode::JsonObject => "json_object",
        }
    }

    /// The request's `response_format`.
    fn format(self) -> Option<OutputFormat> {
        match self {
            Mode::Unconstrained => None,
            Mode::JsonSchema => Some(OutputFormat::JsonSchema {
                schema: person(),
                strict: true,
            }),
            Mode::JsonObject => Some(OutputFormat::JsonObject),
        }
    }

    /// The grammar the worker compiles for that format.
    fn spec(self) -> Option<GrammarSpec> {
        match self {
            Mode::Unconstrained => None,
            Mode::JsonSchema => Some(GrammarSpec::JsonSchema {
                schema: person(),
                strict: true,
            }),
            Mode::JsonObject => Some(GrammarSpec::JsonObject),
        }
    }
}

fn person() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 200},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "age", "tags"],
    })
}

fn main() {
    let passes = bench::iterations(DEFAULT_ITERATIONS);
    let cores = thread::available_parallelism().map_or(0, usize::from);
    println!("cores available: {cores}, max_tokens: {MAX_TOKENS}");
    let results = vec![
        measure_fixture(Size::Small, passes),
        measure_fixture(Size::Tiny, passes * TINY_PASSES),
    ];
    println!("\ndecode with and without a token mask (Llama fixtures, f32, temperature 0)\n");
    print_decode_table(&results);
    println!("\nthe ConstraintFactory, built by the first constrained request\n");
    print_factory_table(&results);
}

/// One request's outcome.
struct Run {
    completion_tokens: usize,
    decode: Duration,
    /// From the call to `generate` to its return: prompt rendering, grammar compile, prefill,
    /// decode.
    wall: Duration,
    text: String,
    /// The sampled tokens, when asked for.
    tokens: Vec<u32>,
}

impl Run {
    fn ms_per_token(&self) -> f64 {
        self.decode.as_secs_f64() * 1e3 / self.completion_tokens as f64
    }
}

struct Fixture {
    name: &'static str,
    parameters: u64,
    vocab_size: usize,
    prompt_tokens: usize,
    /// Per mode, in `MODES` order, one run per pass.
    runs: Vec<Vec<Run>>,
    /// Per mode, the constraint's own time per token, replayed without the model.
    replayed: [Option<Replayed>; 3],
    first_constrained: Duration,
    factory_builds: Vec<Duration>,
}

fn measure_fixture(size: Size, passes: usize) -> Fixture {
    let name = size.name();
    let dir = tempfile::tempdir().expect("a temporary model directory");
    let options = FixtureOptions {
        size,
        arch: Arch::Llama,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    let summary = corral_fixture::generate(&options, dir.path()).expect("generating the fixture");
    let loaded = LoadedModel::load(dir.path()).expect("loading the fixture");

    // The first request of a process pays for MLX's first run; the first constrained one also
    // builds the factory, which no later request does.
    let (_, prompt_tokens) = run(&loaded, Mode::Unconstrained, false);
    let first_constrained = run(&loaded, Mode::JsonSchema, false).0.wall;
    let mut runs: Vec<Vec<Run>> = MODES.iter().map(|_| Vec::new()).collect();
    for pass in 0..passes {
        // Each mode takes each place in a pass in turn, so none always follows the same one.
        for offset in 0..MODES.len() {
            let index = (pass + offset) % MODES.len();
            runs[index].push(run(&loaded, MODES[index], false).0);
        }
        eprintln!("{name}: pass {} of {passes} done", pass + 1);
    }
    let replayed = MODES.map(|mode| replay(&loaded, mode));
    let factory_builds = (0..FACTORY_BUILDS)
        .map(|_| {
            let fresh = LoadedModel::load(dir.path()).expect("loading the fixture again");
            let started = Instant::now();
            fresh
                .constraints()
                .expect("the fixture's vocabulary is supported");
            started.elapsed()
        })
        .collect();
    Fixture {
        name,
        parameters: summary.parameters,
        vocab_size: summary.vocab_size,
        prompt_tokens,
        runs,
        replayed,
        first_constrained,
        factory_builds,
    }
}

/// Runs one request in `mode`; panics unless it ran all `MAX_TOKENS`. Also returns its prompt
/// tokens. `with_tokens` asks for logprobs, which carry the sampled token ids, into
/// `Run::tokens`; the timed requests leave them off.
fn run(loaded: &LoadedModel, mode: Mode, with_tokens: bool) -> (Run, usize) {
    let request = GenerateRequest {
        prompt: Prompt::Chat {
            messages: vec![json!({
                "role": "user",
                "content": "Describe a person as JSON: their name, their age and a few tags.",
            })],
            tools: None,
            template_kwargs: None,
            images: Vec::new(),
        },
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        max_tokens: MAX_TOKENS,
        stop: vec![NEVER.to_owned()],
        logprobs: with_tokens.then_some(0),
        output: OutputOptions {
            tool_choice: ToolChoice::Auto,
            parallel_tool_calls: None,
            format: mode.format(),
            reasoning_budget: None,
        },
        count_only: false,
        speculative: None,
    };
    let mut done = None;
    let mut text = String::new();
    let mut tokens = Vec::new();
    let started = Instant::now();
    generate(
        loaded,
        &request,
        Limits::default(),
        &AtomicBool::new(false),
        |event| match event {
            Event::Delta {
                text: delta,
                logprobs,
                ..
            } => {
                text.push_str(&delta);
                tokens.extend(logprobs.iter().map(|logprob| logprob.token));
            }
            Event::Done {
                finish_reason,
                timings,
                ..
            } => done = Some((finish_reason, timings)),
            Event::Accepted { .. } => {}
        },
    )
    .unwrap_or_else(|error| panic!("{}: generation failed: {error:?}", mode.name()));
    let wall = started.elapsed();
    let (finish_reason, timings) = done.expect("a Done event");
    assert!(
        finish_reason == FinishReason::Length && timings.completion_tokens == MAX_TOKENS,
        "{}: ended with {finish_reason:?} after {} tokens, not {MAX_TOKENS}: {text:?}",
        mode.name(),
        timings.completion_tokens
    );
    let result = Run {
        completion_tokens: timings.completion_tokens,
        decode: timings.decode,
        wall,
        text,
        tokens,
    };
    (result, timings.prompt_tokens)
}

/// The constraint's work in one of `mode`'s requests, per token, without the model: the tokens
/// a request sampled, fed to a freshly compiled constraint with a mask before each, as the
/// decode loop does; median of `REPLAYS`. Hot runs the steps back to back; cold evicts the CPU
/// caches before each step (untimed), as the model's forward pass does between two masks in a
/// real decode. `None` for the unconstrained mode.
fn replay(loaded: &LoadedModel, mode: Mode) -> Option<Replayed> {
    let spec = mode.spec()?;
    let tokens = run(loaded, mode, true).0.tokens;
    assert_eq!(
        tokens.len(),
        MAX_TOKENS,
        "{}: token ids missing",
        mode.name()
    );
    let factory = loaded
        .constraints()
        .expect("the fixture's vocabulary is supported");
    let mut logits = vec![0.0f32; factory.n_vocab()];
    let mut evicted = vec![0u8; EVICTION_BYTES];
    let mut per_token = |evict: bool| {
        let mut replays: Vec<Duration> = (0..REPLAYS)
            .map(|_| {
                let mut constraint =
                    Constraint::compile(factory, &spec).expect("the grammar compiles");
                let mut took = Duration::ZERO;
                for &token in &tokens {
                    if evict {
                        evict_caches(&mut evicted);
                    }
                    let started = Instant::now();
                    constraint.mask(&mut logits).expect("a mask");
                    constraint
                        .accept(token)
                        .expect("the sampled token is allowed");
                    took += started.elapsed();
                }
                took / MAX_TOKENS as u32
            })
            .collect();
        replays.sort();
        replays[(REPLAYS - 1) / 2]
    };
    Some(Replayed {
        hot: per_token(false),
        cold: per_token(true),
    })
}

/// A constraint's time per token, replayed.
#[derive(Clone, Copy)]
struct Replayed {
    hot: Duration,
    cold: Duration,
}

/// Writes a byte in every cache line of `buffer`, larger than the CPU's caches.
fn evict_caches(buffer: &mut [u8]) {
    for byte in buffer.iter_mut().step_by(64) {
        *byte = byte.wrapping_add(1);
    }
    std::hint::black_box(buffer);
}

fn print_decode_table(fixtures: &[Fixture]) {
    println!(
        "| fixture | mode | completion tokens | decode tok/s | ms/token (min..max) | \
         mask overhead µs/token | of a step | replayed µs/token hot / cold | request ms |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for fixture in fixtures {
        let base = &fixture.runs[0];
        let base_ms = median(base.iter().map(Run::ms_per_token));
        for ((mode, runs), replayed) in MODES.into_iter().zip(&fixture.runs).zip(fixture.replayed) {
            let alone = replayed.map_or("-".to_owned(), |replayed| {
                format!("{:.0} / {:.0}", us(replayed.hot), us(replayed.cold))
            });
            let per_token: Vec<f64> = runs.iter().map(Run::ms_per_token).collect();
            let ms_per_token = median(per_token.iter().copied());
            let low = per_token.iter().copied().fold(f64::INFINITY, f64::min);
            let high = per_token.iter().copied().fold(0.0, f64::max);
            let (overhead, share) = if mode == Mode::Unconstrained {
                ("-".to_owned(), "-".to_owned())
            } else {
                // Against the unconstrained request of the same pass, so drift between passes
                // (other work on the machine) cancels out.
                let paired = median(
                    runs.iter()
                        .zip(base)
                        .map(|(run, base)| run.ms_per_token() - base.ms_per_token()),
                );
                (
                    format!("{:+.0}", paired * 1e3),
                    format!("{:+.1}%", paired / base_ms * 100.0),
                )
            };
            println!(
                "| {} | {} | {} | {:.1} | {ms_per_token:.2} ({low:.2}..{high:.2}) | {overhead} | \
                 {share} | {alone} | {:.1} |",
                fixture.name,
                mode.name(),
                runs[0].completion_tokens,
                1e3 / ms_per_token,
                median(runs.iter().map(|run| ms(run.wall))),
            );
        }
    }
    println!(
        "\nmask overhead: median over passes of (ms/token - the same pass's unconstrained \
         ms/token); of a step: that over the unconstrained median; replayed: the same \
         requests' tokens through the constraint alone (mask and accept), back to back (hot) or \
         with the CPU caches evicted before each step (cold)"
    );
    for fixture in fixtures {
        println!(
            "{}: {:.0}M parameters, vocabulary {}, prompt {} tokens, {} passes",
            fixture.name,
            fixture.parameters as f64 / 1e6,
            fixture.vocab_size,
            fixture.prompt_tokens,
            fixture.runs[0].len()
        );
        for (mode, runs) in MODES.into_iter().zip(&fixture.runs) {
            let text: String = runs[0].text.chars().take(48).collect();
            println!("  {} wrote {text:?}...", mode.name());
        }
    }
}

fn print_factory_table(fixtures: &[Fixture]) {
    println!(
        "| fixture | first json_schema request ms | later ones ms (median) | difference ms | \
         constraints() ms (median of {FACTORY_BUILDS}) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for fixture in fixtures {
        let first = ms(fixture.first_constrained);
        let later = median(fixture.runs[1].iter().map(|run| ms(run.wall)));
        let factory = median(fixture.factory_builds.iter().copied().map(ms));
        println!(
            "| {} | {first:.1} | {later:.1} | {:+.1} | {factory:.1} |",
            fixture.name,
            first - later
        );
    }
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_unstable_by(f64::total_cmp);
    values[(values.len() - 1) / 2]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn us(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
