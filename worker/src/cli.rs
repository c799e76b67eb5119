//! Command line of `corral-worker`. The supervisor starts workers itself; people and benchmarks
//! use the one-shot `generate` command.

use std::path::PathBuf;

use crate::batch::{BatchLimits, DEFAULT_MAX_SEQUENCES, DEFAULT_PREFILL_CHUNK};
use crate::distributed::{Backend, Parallel};
use crate::engine::EngineOptions;
use crate::gguf::{self, Requantize};
use crate::prefix_cache::{DEFAULT_BLOCK_TOKENS, DEFAULT_SNAPSHOT_EVERY, PrefixCacheOptions};
use crate::prompt_images::ImageLimits;
use crate::speculation::{DEFAULT_DRAFT_TOKENS, Method, Speculation};
use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "corral-worker",
    version,
    about = "One model's worker process for corral"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate once from a prompt and print the text; speed and memory go to stderr.
    Generate(GenerateArgs),
    /// Serve one model to the supervisor over its socket (started by `corral serve` only; the
    /// one-time token comes in the CORRAL_WORKER_TOKEN environment variable).
    Serve(ServeArgs),
    /// Print, for each model directory or GGUF file, one JSON line saying its format,
    /// architecture, quantization, size, and why it cannot be served if it cannot.
    Describe(DescribeArgs),
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// The vision projector (a GGUF's `mmproj` file) the models are described with.
    #[arg(long, value_name = "FILE")]
    pub mmproj: Option<PathBuf>,
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[arg(long)]
    pub model: PathBuf,
    /// A GGUF model's vision projector (llama.cpp's `mmproj` file), which runs its images.
    #[arg(long, value_name = "FILE")]
    pub mmproj: Option<PathBuf>,
    /// The Unix socket the supervisor listens on for this worker (a group's rank 0's).
    #[arg(long)]
    pub socket: PathBuf,
    /// Run as one rank of a worker group that splits the model this way: join the MLX group
    /// that `--backend` and its environment describe and run this rank's share of it. Rank 0
    /// serves the supervisor; the others step with it.
    #[arg(long, value_enum, value_name = "SPLIT")]
    pub parallel: Option<Parallel>,
    /// MLX's distributed backend a `--parallel` rank joins by.
    #[arg(long, value_enum, default_value = "ring", requires = "parallel")]
    pub backend: Backend,
    /// This worker's share of the memory budget, in bytes: a request whose prefill would take
    /// MLX's memory in use past it is refused before any compute. Without it, no such check.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    pub memory_limit: Option<u64>,
    /// The prefix cache's SSD root: this model's blocks go in a subdirectory named by its
    /// fingerprint, and survive the worker. Without it, blocks are kept in RAM only.
    #[arg(long, value_name = "DIR")]
    pub prefix_cache_dir: Option<PathBuf>,
    /// Bytes of prefix blocks kept in RAM.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30)]
    pub prefix_cache_ram: u64,
    /// Bytes of prefix blocks kept on SSD (the directory's limit).
    #[arg(long, value_name = "BYTES", default_value_t = 10 << 30)]
    pub prefix_cache_disk: u64,
    /// Tokens per prefix block.
    #[arg(long, value_name = "TOKENS", default_value_t = DEFAULT_BLOCK_TOKENS,
          value_parser = clap::value_parser!(u64).range(1..=65536).map(|tokens| tokens as usize))]
    pub prefix_block_tokens: usize,
    /// A model with recurrent layers keeps the state snapshot of every this-many-th block
    /// boundary, besides each prompt's and each sequence's last.
    #[arg(long, value_name = "BLOCKS", default_value_t = DEFAULT_SNAPSHOT_EVERY,
          value_parser = clap::value_parser!(u64).range(1..=65536).map(|blocks| blocks as usize))]
    pub prefix_snapshot_every: usize,
    /// Serve without a prefix cache.
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Sequences decoded together in one batch; requests beyond it wait in the queue.
    #[arg(long, value_name = "COUNT", default_value_t = DEFAULT_MAX_SEQUENCES,
          value_parser = clap::value_parser!(u64).range(1..=256).map(|count| count as usize))]
    pub max_sequences: usize,
    /// Prompt tokens prefilled per forward pass, between the running sequences' decode steps.
    #[arg(long, value_name = "TOKENS", default_value_t = DEFAULT_PREFILL_CHUNK,
          value_parser = clap::value_parser!(u64).range(16..=65536).map(|tokens| tokens as usize))]
    pub prefill_chunk: usize,
    /// What a GGUF's Q2_K, Q3_K, Q6_K, IQ4_NL and IQ4_XS tensors become: 8bit, 6bit or f16.
    #[arg(long, value_name = "FORMAT", default_value = "8bit", value_parser = parse_requantize)]
    pub gguf_requantize: Requantize,
    /// Keep a GGUF's Q4_K and Q5_K values exact (scales in the compute type, 6 bits a value for
    /// Q4_K instead of 5) rather than rounding their scales to f16.
    #[arg(long)]
    pub gguf_exact_k_quants: bool,
    /// Images per request; without it, the model's processor config decides.
    #[arg(long, value_name = "COUNT")]
    pub max_images: Option<usize>,
    /// The most pixels an image is resized to; without it, the processor config's.
    #[arg(long, value_name = "PIXELS")]
    pub image_max_pixels: Option<u64>,
    /// The fewest pixels an image is resized to; without it, the processor config's.
    #[arg(long, value_name = "PIXELS")]
    pub image_min_pixels: Option<u64>,
    /// How decoding guesses tokens ahead for the model to check: off, ngram (prompt lookup),
    /// draft (the `--draft` model's guesses) or mtp (the model's own multi-token-prediction
    /// layer); without it, where MLX computes on a GPU mtp where the model has such a layer and
    /// ngram where not, and off on its CPU backend.
    #[arg(long, value_name = "METHOD", value_parser = parse_method)]
    pub speculative: Option<Method>,
    /// The draft model (a directory or GGUF file) for `--speculative draft` and for requests that
    /// ask for it: a smaller model of the same tokenizer, loaded in this worker.
    #[arg(long, value_name = "PATH")]
    pub draft: Option<PathBuf>,
    /// The most tokens a sequence guesses per pass.
    #[arg(long, value_name = "TOKENS", default_value_t = DEFAULT_DRAFT_TOKENS,
          value_parser = clap::value_parser!(u64).range(1..=32).map(|tokens| tokens as usize))]
    pub draft_tokens: usize,
}

fn parse_method(name: &str) -> Result<Method, String> {
    Method::parse(name).ok_or_else(|| {
        let names: Vec<&str> = Method::ALL.into_iter().map(Method::name).collect();
        format!("expected one of {}", names.join(", "))
    })
}

fn parse_requantize(name: &str) -> Result<Requantize, String> {
    Requantize::parse(name)
        .ok_or_else(|| format!("expected one of {}", Requantize::NAMES.join(", ")))
}

impl ServeArgs {
    pub fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            memory_limit: self.memory_limit,
            batch: BatchLimits {
                max_sequences: self.max_sequences,
                prefill_chunk: self.prefill_chunk,
                images: ImageLimits {
                    max_images: self.max_images,
                    max_pixels: self.image_max_pixels,
                    min_pixels: self.image_min_pixels,
                },
                speculation: Speculation {
                    draft_tokens: self.draft_tokens,
                    ..Speculation::default()
                },
            },
            prefix_cache: (!self.no_prefix_cache).then(|| PrefixCacheOptions {
                block_tokens: self.prefix_block_tokens,
                ram_bytes: self.prefix_cache_ram,
                disk_root: self.prefix_cache_dir.clone(),
                disk_bytes: self.prefix_cache_disk,
                snapshot_every: self.prefix_snapshot_every,
            }),
            gguf: gguf::Choices {
                requantize: self.gguf_requantize,
                exact_k_quants: self.gguf_exact_k_quants,
            },
            projector: self.mmproj.clone(),
            draft: self.draft.clone(),
            speculative: self.speculative,
            group: None,
        }
    }
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// A Hugging Face-layout model directory or a GGUF file.
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long)]
    pub prompt: String,
    /// Render the prompt as one user message with the model's chat template.
    #[arg(long)]
    pub chat: bool,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop before this text (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Print each token as a JSON line with its log-probability and this many alternatives,
    /// instead of the text.
    #[arg(long)]
    pub logprobs: Option<usize>,
    /// Run as one rank of a group that splits the model this way: join the MLX group that
    /// `--backend` and its environment describe (as `mlx.launch` sets them) and run this rank's
    /// share of it (its layers, or its slice of every layer); rank 0 prints.
    #[arg(long, value_enum, value_name = "SPLIT")]
    pub parallel: Option<Parallel>,
    /// MLX's distributed backend a `--parallel` rank joins by.
    #[arg(long, value_enum, default_value = "ring", requires = "parallel")]
    pub backend: Backend,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(extra: &[&str]) -> ServeArgs {
        let args = ["corral-worker", "serve", "--model", "m", "--socket", "s"];
        let cli = Cli::try_parse_from(args.iter().chain(extra)).expect("parses");
        match cli.command {
            Command::Serve(args) => args,
            other => panic!("not serve: {other:?}"),
        }
    }

    #[test]
    fn image_limits_reach_the_batch_and_default_to_the_processor_configs() {
        assert_eq!(
            serve(&[]).engine_options().batch.images,
            ImageLimits::default()
        );
        let limits = serve(&[
            "--max-images",
            "2",
            "--image-max-pixels",
            "1003520",
            "--image-min-pixels",
            "3136",
        ])
        .engine_options()
        .batch
        .images;
        assert_eq!(
            limits,
            ImageLimits {
                max_images: Some(2),
                max_pixels: Some(1_003_520),
                min_pixels: Some(3136),
            }
        );
    }

    #[test]
    fn a_rank_joins_the_ring_unless_told_another_backend_which_only_a_rank_takes() {
        assert_eq!(serve(&["--parallel", "tensor"]).backend, Backend::Ring);
        let rank = serve(&["--parallel", "pipeline", "--backend", "jaccl"]);
        assert_eq!(
            (rank.parallel, rank.backend),
            (Some(Parallel::Pipeline), Backend::Jaccl)
        );
        assert_eq!(serve(&[]).parallel, None);
        let args = ["corral-worker", "serve", "--model", "m", "--socket", "s"];
        let alone = Cli::try_parse_from(args.iter().chain(&["--backend", "jaccl"]));
        assert!(alone.is_err(), "--backend without --parallel");
    }
}
