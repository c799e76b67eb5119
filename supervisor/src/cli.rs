//! The command-line surface of `corral`: one `Command` variant per subcommand, each turned into a
//! library call. Kept apart from `main.rs` so that adding a subcommand touches only this file and
//! the module that implements it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use corral::config::Overrides;
use corral::fixture::{self, Arch, Bits, Dtype, FixtureOptions, Size};
use corral::memory::MemoryAmount;
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
    /// Serve the OpenAI API on local models, one worker process per model.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML configuration file; flags and CORRAL_* variables override its values.
    #[arg(long, env = "CORRAL_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on (loopback by default).
    #[arg(long, env = "CORRAL_HOST")]
    host: Option<std::net::IpAddr>,
    /// Port to listen on; 0 picks a free one (the log says which).
    #[arg(long, env = "CORRAL_PORT")]
    port: Option<u16>,
    /// A directory of models (repeatable; the variable takes a colon-separated list).
    #[arg(long = "models-dir", env = "CORRAL_MODELS_DIR", value_delimiter = ':')]
    models_dirs: Vec<PathBuf>,
    /// One model directory to serve, besides those found in the models directories.
    #[arg(long, env = "CORRAL_MODEL")]
    model: Option<PathBuf>,
    /// Seconds in-flight requests may run on after SIGTERM or SIGINT.
    #[arg(long, env = "CORRAL_DRAIN_TIMEOUT")]
    drain_timeout: Option<u64>,
    /// Where corral keeps generated models, sockets and worker records.
    #[arg(long, env = "CORRAL_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// The corral-worker executable to spawn (by default the one next to corral).
    #[arg(long, env = "CORRAL_WORKER_BINARY")]
    worker_binary: Option<PathBuf>,
    /// Memory the workers may use together: bytes, with units (`6GiB`, `512MiB`, `8GB`) or a
    /// share of RAM (`75%`). Default: total RAM minus max(2 GiB, 10%).
    #[arg(long, env = "CORRAL_MEMORY_CEILING")]
    memory_ceiling: Option<MemoryAmount>,
    /// At most this many models loaded at once.
    #[arg(long, env = "CORRAL_MAX_LOADED_MODELS")]
    max_loaded_models: Option<usize>,
    /// Seconds a worker may sit idle before it is stopped (default: never).
    #[arg(long, env = "CORRAL_IDLE_TIMEOUT")]
    idle_timeout: Option<u64>,
    /// A model to start with the server and never evict (repeatable; the variable takes a
    /// comma-separated list).
    #[arg(long = "pin", env = "CORRAL_PIN", value_delimiter = ',')]
    pinned: Vec<String>,
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
                config_file: args.config,
                overrides: Overrides {
                    host: args.host,
                    port: args.port,
                    models_dirs: args.models_dirs,
                    drain_timeout_secs: args.drain_timeout,
                    state_dir: args.state_dir,
                    worker_binary: args.worker_binary,
                    memory_ceiling: args.memory_ceiling,
                    max_loaded_models: args.max_loaded_models,
                    idle_timeout_secs: args.idle_timeout,
                    pinned: args.pinned,
                },
                model: args.model,
            }),
        }
    }
}
