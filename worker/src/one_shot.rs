//! `corral-worker generate`: one prompt, the text streamed to stdout, the figures to stderr, and
//! [`generate`], which runs one request to its end through a batch of its own (the benches call
//! it too).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};

use crate::batch::{Batch, BatchLimits, Job};
use crate::cli::GenerateArgs;
use crate::distributed::{Group, Member};
use crate::generation::{
    Event, GenerateError, GenerateRequest, OutputOptions, Prompt, Timings, TokenLogprob,
};
use crate::gguf;
use crate::loaded::LoadedModel;
use crate::prefix_cache::PrefixCache;
use crate::process_memory::peak_resident_bytes;
use crate::sampling::SamplingParams;

pub fn run(args: GenerateArgs) -> Result<()> {
    // Every rank runs the same request through the same batch, so each takes the same steps;
    // only rank 0 speaks.
    let member = match args.parallel {
        Some(parallel) => Some(Member {
            group: Arc::new(Group::join(args.backend).context("joining the group")?),
            parallel,
        }),
        None => None,
    };
    let speaks = member
        .as_ref()
        .is_none_or(|member| member.group.rank() == 0);
    // The one-shot mode has a single request, so the main thread serves as the engine thread.
    let loaded = LoadedModel::load_with(&args.model, gguf::Choices::default(), None, member)
        .with_context(|| format!("loading {}", args.model.display()))?;
    let model = &loaded.model;
    if let Some(group) = model.group() {
        let share = match model.pipeline() {
            Some(pipeline) => format!(
                "layers {:?} of {}",
                pipeline.layers(),
                model.config.num_layers
            ),
            None => "a slice of every layer".to_owned(),
        };
        eprintln!(
            "rank {} of {}: {share}, weights {:.1} MiB",
            group.rank(),
            group.size(),
            model.weight_bytes() as f64 / (1024.0 * 1024.0)
        );
    }
    let prompt = if args.chat {
        Prompt::Chat {
            messages: vec![serde_json::json!({"role": "user", "content": args.prompt})],
            tools: None,
            template_kwargs: None,
            images: Vec::new(),
        }
    } else {
        Prompt::Text(args.prompt)
    };
    let request = GenerateRequest {
        prompt,
        sampling: SamplingParams {
            temperature: args.temperature,
            top_p: args.top_p,
            top_k: args.top_k,
            min_p: args.min_p,
            repetition_penalty: args.repetition_penalty,
            seed: args.seed,
            ..SamplingParams::default()
        },
        max_tokens: args.max_tokens,
        stop: args.stop,
        logprobs: args.logprobs,
        output: OutputOptions::default(),
        count_only: false,
        speculative: None,
    };
    let mut stdout = std::io::stdout().lock();
    let mut timings = None;
    let mut write_error = None;
    generate(
        &loaded,
        &request,
        Limits::default(),
        &AtomicBool::new(false),
        |event| match event {
            Event::Delta { .. } if !speaks => {}
            Event::Delta { text, logprobs, .. } => {
                let written = match args.logprobs {
                    Some(_) => logprobs
                        .iter()
                        .try_for_each(|token| writeln!(stdout, "{}", logprob_line(token))),
                    None => stdout.write_all(text.as_bytes()),
                };
                if let Err(error) = written.and_then(|()| stdout.flush()) {
                    write_error.get_or_insert(error);
                }
            }
            Event::Done { timings: done, .. } => timings = Some(done),
            Event::Accepted { .. } => {}
        },
    )?;
    if let Some(error) = write_error {
        return Err(error).context("writing to stdout");
    }
    if !speaks {
        return Ok(());
    }
    if args.logprobs.is_none() {
        writeln!(stdout).context("writing to stdout")?;
    }
    if let Some(timings) = timings {
        report(&loaded, &timings);
    }
    Ok(())
}

/// One sampled token as a JSON line: its id, text, log-probability and the top alternatives.
fn logprob_line(token: &TokenLogprob) -> serde_json::Value {
    serde_json::json!({
        "token": token.token,
        "text": token.text,
        "logprob": token.logprob,
        "top": token.top.iter().map(|(id, _, logprob)| (id, logprob)).collect::<Vec<_>>(),
    })
}

/// What bounds and speeds up one generation besides its request.
#[derive(Default)]
pub struct Limits<'a> {
    /// A prompt whose prefill would not fit under this is refused before any compute.
    pub memory: Option<u64>,
    /// Restores a cached prompt prefix and keeps the prompt's blocks.
    pub prefix: Option<&'a mut PrefixCache>,
}

/// Runs `request` to its end on this thread, reporting events; `cancel` is checked before each
/// prefill chunk and token. The one-shot CLI's path: the engine's batch with one sequence.
pub fn generate(
    loaded: &LoadedModel,
    request: &GenerateRequest,
    limits: Limits<'_>,
    cancel: &AtomicBool,
    mut emit: impl FnMut(Event),
) -> Result<(), GenerateError> {
    let mut failure = None;
    let mut batch = Batch::new(loaded, BatchLimits::default(), limits.memory, limits.prefix);
    batch.submit(Job {
        request: request.clone(),
        cancelled: Box::new(|| cancel.load(Ordering::Relaxed)),
        sink: Box::new(|event| match event {
            Ok(event) => emit(event),
            Err(error) => failure = Some(error),
        }),
    });
    while !batch.is_idle() {
        batch.step();
    }
    drop(batch);
    failure.map_or(Ok(()), Err)
}

fn report(loaded: &LoadedModel, timings: &Timings) {
    let per_second = |tokens: usize, seconds: f64| {
        if seconds > 0.0 {
            tokens as f64 / seconds
        } else {
            0.0
        }
    };
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let prefill = timings.prefill.as_secs_f64();
    let decode = timings.decode.as_secs_f64();
    eprintln!(
        "load: {:.2} s, weights {:.1} MiB",
        loaded.load_time.as_secs_f64(),
        mib(loaded.model.weight_bytes() as u64)
    );
    eprintln!(
        "prompt: {} tokens, {:.1} tokens/s",
        timings.prompt_tokens,
        per_second(timings.prompt_tokens, prefill)
    );
    eprintln!(
        "decode: {} tokens, {:.1} tokens/s",
        timings.completion_tokens,
        per_second(timings.completion_tokens.saturating_sub(1), decode)
    );
    let mlx_peak = mlx_rs::memory::peak_memory().unwrap_or(0) as u64;
    let resident = peak_resident_bytes().unwrap_or(0);
    eprintln!(
        "peak memory: {:.1} MiB resident, {:.1} MiB MLX",
        mib(resident),
        mib(mlx_peak)
    );
}
