//! The command-line surface of `corral`: one `Command` variant per subcommand, each turned into a
//! library call. Kept apart from `main.rs` so that adding a subcommand touches only this file and
//! the module that implements it.

mod pull;
mod service;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use corral::cluster::Identity;
use corral::config::{Config, LogConfig, Overrides};
use corral::memory::MemoryAmount;
use corral::ops::{self, Operation};
use corral::serve::{self, ServeOptions};
use corral_fixture::{Arch, Bits, Dtype, FixtureOptions, Format, GgufType, Size, Task};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl Cli {
    /// Only `serve` logs much; every other command writes text.
    pub fn log_format(&self) -> LogFormat {
        match &self.command {
            Command::Serve(args) => args.log_format,
            _ => LogFormat::Text,
        }
    }

    /// Where `serve` logs when its configuration names a log directory; `None`: stderr. A
    /// configuration that does not load is left for `serve` to report, after logging starts.
    pub fn log_files(&self) -> Option<(PathBuf, LogConfig)> {
        let Command::Serve(args) = &self.command else {
            return None;
        };
        let options = args.clone().into_options();
        let config = Config::load(options.config_file.as_deref(), options.overrides).ok()?;
        Some((config.log.dir.clone()?, config.log))
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a deterministic random-weight model for tests: a Hugging Face directory, or one GGUF
    /// file with --gguf.
    ///
    /// `corral fixture --size tiny --arch qwen3 --out DIR` writes config.json,
    /// generation_config.json, tokenizer.json, tokenizer_config.json and model.safetensors into
    /// DIR. `corral fixture --size tiny --arch qwen3 --gguf q8_0 --out FILE.gguf` writes the same
    /// weights, tokenizer and chat template as one llama.cpp GGUF file. `corral fixture --size
    /// small --arch bert --task embedding --out DIR` writes a sentence-transformers BERT encoder
    /// (all-MiniLM-L6-v2's shapes, WordPiece tokenizer, modules.json, 1_Pooling, 2_Normalize);
    /// `--task rerank` a cross-encoder; `--arch qwen3 --task embedding` a Qwen3-Embedding-style
    /// decoder embedder.
    Fixture(FixtureArgs),
    /// Serve the OpenAI API on local models, one worker process per model.
    Serve(ServeArgs),
    /// List the running workers: pid, state, footprint, leases, uptime, last exit.
    Ps(OutputArgs),
    /// List the models the server knows, loaded or not.
    Models(OutputArgs),
    /// Whether the server is up, its memory budget and its workers.
    Status(OutputArgs),
    /// End a model's worker now (SIGKILL unless --signal), or after its requests with --drain.
    Kill(KillArgs),
    /// Start a model's worker and wait until it is ready.
    Load(ModelArgs),
    /// Stop a model's worker once its requests have finished.
    Unload(ModelArgs),
    /// Download a model from the Hugging Face hub into its cache (ORG/NAME[@REVISION]).
    Pull(pull::PullArgs),
    /// Install and control `corral serve` as a per-user service (launchd on macOS, systemd on
    /// Linux).
    Service(service::ServiceArgs),
    /// Print this host's cluster key, made on first use: the key other hosts name for it in
    /// `[cluster.hosts.NAME] key`, or in `[cluster] coordinators` to let it start ranks there.
    Key(KeyArgs),
}

#[derive(Debug, Clone, Args)]
pub struct KeyArgs {
    /// The TOML configuration file whose state_dir holds the key.
    #[arg(long, env = "CORRAL_CONFIG")]
    config: Option<PathBuf>,
    /// Where corral keeps its state, the key among it.
    #[arg(long, env = "CORRAL_STATE_DIR")]
    state_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
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
    /// Seconds a request for a model that does not fit in memory waits for room before it gets
    /// 507 (default 30; 0 refuses at once).
    #[arg(long, env = "CORRAL_ADMISSION_WAIT")]
    admission_wait: Option<u64>,
    /// A model to start with the server and never evict (repeatable; the variable takes a
    /// comma-separated list).
    #[arg(long = "pin", env = "CORRAL_PIN", value_delimiter = ',')]
    pinned: Vec<String>,
    /// An API key clients must send (repeatable; the variable takes a comma-separated list).
    /// Prefer the variable or the config file: arguments show in `ps`.
    #[arg(
        long = "api-key",
        env = "CORRAL_API_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    api_keys: Vec<String>,
    /// The key for the operator routes (/admin, load, unload, /metrics).
    #[arg(long, env = "CORRAL_ADMIN_KEY", hide_env_values = true)]
    admin_key: Option<String>,
    /// Listen on a non-loopback address even without an API key.
    #[arg(long = "allow-unauthenticated-remote")]
    allow_remote_without_key: bool,
    /// Where workers keep prefix KV blocks on SSD (default: <state dir>/kv-cache).
    #[arg(long, env = "CORRAL_PREFIX_CACHE_DIR")]
    prefix_cache_dir: Option<PathBuf>,
    /// `text` for people, `json` (one object per line) for log collectors.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log to size-rotated files in this directory (`corral.log`, `corral.log.1`, ...) instead of
    /// stderr; `[log]` in the config sets their size and count.
    #[arg(long, env = "CORRAL_LOG_DIR")]
    log_dir: Option<PathBuf>,
}

/// How the operator commands find the server (the same configuration as `serve`).
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// The server's base URL, e.g. http://127.0.0.1:8080 (default: from the configuration).
    #[arg(long, env = "CORRAL_URL", global = true)]
    url: Option<String>,
    /// The TOML configuration `serve` reads, for its host and port.
    #[arg(long, env = "CORRAL_CONFIG", global = true)]
    config: Option<PathBuf>,
    #[arg(long, env = "CORRAL_HOST", global = true, hide = true)]
    host: Option<std::net::IpAddr>,
    #[arg(long, env = "CORRAL_PORT", global = true, hide = true)]
    port: Option<u16>,
    /// The admin key, when the server has one.
    #[arg(long, env = "CORRAL_ADMIN_KEY", global = true, hide_env_values = true)]
    admin_key: Option<String>,
}

impl TargetArgs {
    fn target(self) -> ops::Target {
        ops::Target {
            url: self.url,
            config_file: self.config,
            host: self.host,
            port: self.port,
            key: self.admin_key,
        }
    }
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Print the server's JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ModelArgs {
    /// The model id or alias.
    model: String,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct KillArgs {
    /// The model id or alias.
    model: String,
    /// The signal to send instead of SIGKILL (SIGTERM, SIGINT, ...).
    #[arg(long)]
    signal: Option<String>,
    /// Let the requests in flight finish, then stop the worker gracefully.
    #[arg(long, conflicts_with = "signal")]
    drain: bool,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct FixtureArgs {
    /// How big the model is: `tiny` for unit tests, `small` for load and memory tests.
    #[arg(long, value_enum)]
    size: Size,
    /// Directory to write (created if missing, files in it overwritten); with --gguf, the file to
    /// write (parent directories created, the file overwritten).
    #[arg(long)]
    out: PathBuf,
    /// Floating-point type of the weights (and of quantization scales and biases).
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    dtype: Dtype,
    /// Quantize the linear and embedding weights to this many bits (MLX affine, group size 64).
    #[arg(long, value_enum)]
    quantize: Option<Bits>,
    /// Write one GGUF file instead of a directory, its matrices in this llama.cpp type (norms and
    /// biases stay f32); the weights are those of the f32 directory.
    #[arg(long, value_enum, conflicts_with_all = ["dtype", "quantize"])]
    gguf: Option<GgufType>,
    /// Which model family's tensor names and config the fixture imitates (`bert`, `xlm-roberta`:
    /// encoders; bert's `small` has all-MiniLM-L6-v2's shapes).
    #[arg(long, value_enum, default_value_t = Arch::Llama)]
    arch: Arch,
    /// What the model is for: `chat` (decoders' default), `embedding` (a sentence-transformers
    /// model: mean pooling for bert, the encoders' default; last-token pooling and a
    /// Qwen3-Embedding query prompt for decoders) or `rerank` (a one-label cross-encoder,
    /// bert or xlm-roberta).
    #[arg(long, value_enum)]
    task: Option<Task>,
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
                    format: args.gguf.map_or(Format::Safetensors, Format::Gguf),
                };
                let task = args.task.unwrap_or(args.arch.default_task());
                let summary = corral_fixture::generate_for_task(&options, task, &args.out)?;
                println!(
                    "wrote {} {} ({} parameters, vocab {}) to {}",
                    options,
                    task.name(),
                    summary.parameters,
                    summary.vocab_size,
                    args.out.display()
                );
                Ok(())
            }
            Command::Serve(args) => serve::run(args.into_options()),
            Command::Ps(args) => operate(args, Operation::Ps),
            Command::Models(args) => operate(args, Operation::Models),
            Command::Status(args) => operate(args, Operation::Status),
            Command::Kill(args) => operate(
                args.output,
                Operation::Kill {
                    model: args.model,
                    signal: args.signal,
                    drain: args.drain,
                },
            ),
            Command::Load(args) => operate(args.output, Operation::Load { model: args.model }),
            Command::Unload(args) => operate(args.output, Operation::Unload { model: args.model }),
            Command::Pull(args) => args.run(),
            Command::Service(args) => args.run(),
            Command::Key(args) => {
                let overrides = Overrides {
                    state_dir: args.state_dir,
                    ..Overrides::default()
                };
                let config = Config::load(args.config.as_deref(), overrides)?;
                let state_dir = match config.state_dir {
                    Some(dir) => dir,
                    None => corral::state_dir::state_dir()?,
                };
                println!("{}", Identity::load_or_create(&state_dir)?.public());
                Ok(())
            }
        }
    }
}

impl ServeArgs {
    fn into_options(self) -> ServeOptions {
        ServeOptions {
            config_file: self.config,
            overrides: Overrides {
                host: self.host,
                port: self.port,
                models_dirs: self.models_dirs,
                drain_timeout_secs: self.drain_timeout,
                state_dir: self.state_dir,
                worker_binary: self.worker_binary,
                memory_ceiling: self.memory_ceiling,
                max_loaded_models: self.max_loaded_models,
                idle_timeout_secs: self.idle_timeout,
                admission_wait_secs: self.admission_wait,
                pinned: self.pinned,
                api_keys: self.api_keys,
                admin_key: self.admin_key,
                allow_remote_without_key: self.allow_remote_without_key,
                prefix_cache_dir: self.prefix_cache_dir,
                log_dir: self.log_dir,
            },
            model: self.model,
        }
    }
}

fn operate(args: OutputArgs, operation: Operation) -> anyhow::Result<()> {
    ops::run(args.target.target(), operation, args.json)
}
