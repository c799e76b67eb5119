//! What the prefix KV cache saves: time to first token for a long prompt (about 4000 tokens) on
//! the `small` fixture, cold, with the worker's RAM tier warm, and with only the SSD tier
//! warm after the worker was killed and started again.
//!
//! It starts `corral serve` with the default prefix cache (blocks of 256 tokens, the SSD tier
//! under `<state dir>/kv-cache`). Each repetition takes a prompt of its own, a unique nonce word
//! at the very start of the user message, so no block is shared with an earlier one, and:
//!
//! 1. loads the model (`POST /v1/models/small/load`, which returns when the worker is ready);
//! 2. sends the prompt: cold, no cached tokens;
//! 3. sends it again: its blocks come from the RAM tier;
//! 4. waits for the SSD writer to persist them (`GET /admin/workers`: no backlog left);
//! 5. kills the worker (`POST /admin/workers/small/kill`, SIGKILL, returns once it is reaped),
//!    loads the model again (a new worker, RAM tier empty) and sends the prompt a third time: its
//!    blocks come from the SSD tier.
//!
//! Each request is a streamed chat completion with `max_tokens` 1 and temperature 0. Its time to
//! first token runs from sending it to the first SSE event whose `choices[0].delta.content` is
//! not empty, or to the usage chunk (`stream_options.include_usage`) when the one token decodes to
//! no text; the output says which ended how many. Cached tokens are the usage chunk's
//! `prompt_tokens_details.cached_tokens`. One untimed long request goes first, so the first cold
//! request does not also pay for the worker's first run; the SSD case is always a new worker's
//! first request, as it is after a real restart.
//!
//! Run it with release binaries in place (plain cargo cannot link MLX on Linux):
//!
//! ```text
//! cargo xtask cargo build --release --bins
//! cargo xtask cargo bench -p corral-tests --bench prefix_cache
//! ```
//!
//! `CORRAL_BENCH_ITERATIONS` sets the number of repetitions (default 3), and
//! `CORRAL_BENCH_DTYPE` the fixture's weights and so its KV cache (`f32`, the default, `f16` or
//! `bf16`). Only 127.0.0.1 is contacted; the temporary models and state directories are removed at the end.

// A bench's root is its crate root, so its modules need their path spelled out.
#[path = "prefix_cache/through_corral.rs"]
mod through_corral;

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::Path;
use std::thread;
use std::time::Duration;

use clap::ValueEnum;
use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use corral_tests::bench;

use through_corral::{Corral, FirstEvent, FirstToken};

const DEFAULT_ITERATIONS: usize = 3;
/// The fixture's directory name, which is its model id.
const MODEL: &str = "small";
/// Sentences in the user message; the fixture tokenizer makes about 4000 tokens of them.
const SENTENCES: usize = 152;
/// The prompt sizes this bench means to measure; the fixtures' context is 8192.
const PROMPT_TOKENS: RangeInclusive<u64> = 3500..=4500;
/// Startup, shutdown and any single request; generous, since a cold long prompt on a machine with
/// few cores takes a while.
const PATIENCE: Duration = Duration::from_secs(300);

fn main() {
    let iterations = bench::iterations(DEFAULT_ITERATIONS);
    let dtype = dtype();
    let models = tempfile::tempdir().expect("temporary models directory");
    let state = tempfile::tempdir().expect("temporary state directory");
    generate_model(models.path(), dtype);
    let corral = Corral::start(models.path(), state.path());
    corral.load(MODEL);
    corral.first_token(MODEL, &prompt("warmup"));
    let rounds: Vec<Round> = (0..iterations).map(|i| measure_round(&corral, i)).collect();
    let stats = corral.prefix_stats(MODEL);
    drop(corral);

    let cores = thread::available_parallelism().map_or(0, usize::from);
    let block_tokens = corral::config::PrefixCacheConfig::default().block_tokens;
    println!("cores available: {cores}");
    println!(
        "prompt tokens: {}, block size: {block_tokens} tokens, {iterations} repetitions",
        spread(rounds.iter().map(|round| round.cold.prompt_tokens))
    );
    println!(
        "SSD tier: {} bytes per block file ({} files, {} bytes)",
        stats.disk_bytes / stats.disk_files.max(1),
        stats.disk_files,
        stats.disk_bytes
    );
    println!(
        "\ntime to first token for a long prompt through corral serve (`small`, {})\n",
        dtype.name()
    );
    print_table(&rounds);
}

/// `CORRAL_BENCH_DTYPE` when set, else f32.
fn dtype() -> Dtype {
    match std::env::var("CORRAL_BENCH_DTYPE") {
        Ok(value) => Dtype::from_str(&value, true).unwrap_or_else(|_| {
            panic!("CORRAL_BENCH_DTYPE must be f32, f16 or bf16, got {value:?}")
        }),
        Err(_) => Dtype::F32,
    }
}

fn generate_model(models: &Path, dtype: Dtype) {
    let options = FixtureOptions {
        size: Size::Small,
        arch: Arch::Llama,
        dtype,
        quantize: None,
        format: Format::Safetensors,
    };
    corral_fixture::generate(&options, &models.join(MODEL)).expect("generating the fixture");
}

/// A long user message starting with `nonce`: the nonce lands in the first block, so prompts
/// with different nonces share no block.
fn prompt(nonce: &str) -> String {
    let mut text = format!("{nonce}\n");
    for line in 0..SENTENCES {
        text.push_str(&format!(
            "Line {line}: the river ran slowly past the old mill, and the morning light came \
             through the trees.\n"
        ));
    }
    text
}

/// One prompt, three times: cold, from the RAM tier, from the SSD tier after a restart.
struct Round {
    cold: FirstToken,
    ram: FirstToken,
    ssd: FirstToken,
}

fn measure_round(corral: &Corral, index: usize) -> Round {
    let prompt = prompt(&format!("nonce{index}"));
    corral.load(MODEL);
    let enqueued = corral.prefix_stats(MODEL).saves_enqueued;
    let cold = corral.first_token(MODEL, &prompt);
    assert!(
        PROMPT_TOKENS.contains(&cold.prompt_tokens),
        "the prompt has {} tokens; adjust SENTENCES to land in {PROMPT_TOKENS:?}",
        cold.prompt_tokens
    );
    assert_eq!(
        cold.cached_tokens, 0,
        "the cold request found cached tokens"
    );
    let ram = corral.first_token(MODEL, &prompt);
    assert!(
        ram.cached_tokens > 0,
        "the repeated request found nothing cached"
    );

    let block_tokens = corral::config::PrefixCacheConfig::default().block_tokens as u64;
    corral.wait_for_ssd_writer(MODEL, enqueued + ram.cached_tokens / block_tokens);
    corral.kill(MODEL);
    corral.load(MODEL);
    let ssd = corral.first_token(MODEL, &prompt);
    let stats = corral.prefix_stats(MODEL);
    assert!(
        stats.hit_blocks > 0,
        "the new worker hit no block: {stats:?}"
    );
    assert_eq!(
        stats.load_errors, 0,
        "block files failed to load: {stats:?}"
    );
    assert_eq!(
        ssd.cached_tokens, ram.cached_tokens,
        "the SSD tier held fewer tokens than the RAM tier: {stats:?}"
    );
    Round { cold, ram, ssd }
}

fn print_table(rounds: &[Round]) {
    let column = |pick: fn(&Round) -> &FirstToken| rounds.iter().map(pick).collect::<Vec<_>>();
    let cases = [
        ("cold", column(|round| &round.cold)),
        ("RAM tier warm", column(|round| &round.ram)),
        ("SSD tier warm (after restart)", column(|round| &round.ssd)),
    ];
    println!("| case | median ms | min ms | max ms | cached tokens |");
    println!("|---|---:|---:|---:|---:|");
    let mut medians = Vec::new();
    let mut ended_by: BTreeMap<FirstEvent, usize> = BTreeMap::new();
    for (case, samples) in cases {
        let mut ms: Vec<f64> = samples
            .iter()
            .map(|sample| sample.elapsed.as_secs_f64() * 1e3)
            .collect();
        ms.sort_unstable_by(f64::total_cmp);
        let median = ms[(ms.len() - 1) / 2];
        medians.push(median);
        for sample in &samples {
            *ended_by.entry(sample.ended_by).or_default() += 1;
        }
        println!(
            "| {case} | {median:.1} | {:.1} | {:.1} | {} |",
            ms[0],
            ms[ms.len() - 1],
            spread(samples.iter().map(|sample| sample.cached_tokens))
        );
    }
    println!(
        "\nspeed-up over cold (median over median): RAM tier warm {:.1}x, SSD tier warm {:.1}x",
        medians[0] / medians[1],
        medians[0] / medians[2]
    );
    let ended_by: Vec<_> = ended_by
        .iter()
        .map(|(event, n)| format!("{} x{n}", format!("{event:?}").to_lowercase()))
        .collect();
    println!(
        "first token timed to: {} (content: a chunk with text; usage: the usage chunk)",
        ended_by.join(", ")
    );
}

/// "3840", or "3840..3841" where the values differ.
fn spread(values: impl Iterator<Item = u64>) -> String {
    let (low, high) = values.fold((u64::MAX, 0), |(low, high), v| (low.min(v), high.max(v)));
    if low == high {
        format!("{low}")
    } else {
        format!("{low}..{high}")
    }
}
