//! The command-line surface of `corral`: one `Command` variant per subcommand, each turned into a
//! library call. Kept apart from `main.rs` so that adding a subcommand touches only this file and
//! the module that implements it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use corral::fixture::{self, Arch, Bits, Dtype, FixtureOptions, Size};
use corral::serve::{self, ServeOptions};

#[derive(Debug, Parser)]
#[command(
    name = "corral",
    version,
    about = "Serve local LLMs, one worker process per model"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a deterministic random-weight model directory (Hugging Face layout) for tests.
    Fixture(FixtureArgs),
    /// Serve a model (for now: one generation with a worker; the HTTP API comes next).
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A model directory; without one, a generated `small` model in the state directory.
    #[arg(long, env = "CORRAL_MODEL")]
    model: Option<PathBuf>,
    #[arg(long, default_value = "Tell me about the corral.")]
    prompt: String,
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
}

#[derive(Debug, Args)]
pub struct FixtureArgs {
    /// How big the model is: `tiny` for unit tests, `small` for load and memory tests.
    #[arg(long, value_enum)]
    size: Size,
    /// Directory to write; created if missing, files in it are overwritten.
    #[arg(long)]
    out: PathBuf,
    /// Floating-point type of the weights (and of quantization scales and biases).
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    dtype: Dtype,
    /// Quantize the linear and embedding weights to this many bits (MLX affine, group size 64).
    #[arg(long, value_enum)]
    quantize: Option<Bits>,
    /// Which model family's tensor names and config the fixture imitates.
    #[arg(long, value_enum, default_value_t = Arch::Llama)]
    arch: Arch,
}

impl Command {
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Fixture(args) => {
                let options = FixtureOptions {
                    size: args.size,
                    arch: args.arch,
                    dtype: args.dtype,
                    quantize: args.quantize,
                };
                let summary = fixture::generate(&options, &args.out)?;
                println!(
                    "wrote {} ({} parameters, vocab {}) to {}",
                    options,
                    summary.parameters,
                    summary.vocab_size,
                    args.out.display()
                );
                Ok(())
            }
            Command::Serve(args) => serve::run(ServeOptions {
                model: args.model,
                prompt: args.prompt,
                max_tokens: args.max_tokens,
            }),
        }
    }
}
