//! `corral serve`'s configuration: one typed struct with defaults that need no file.
//!
//! Precedence, highest first: command-line flags, `CORRAL_*` environment variables (clap reads
//! both), the TOML file (`--config` / `CORRAL_CONFIG`), then the defaults below.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use corral_ipc::{SamplingValues, SpeculativeMethod};
use serde::Deserialize;

use crate::cluster::ClusterConfig;
use crate::memory::MemoryAmount;
use crate::memory::budget::{DEFAULT_HARD_FRACTION, DEFAULT_SOFT_FRACTION};
use crate::process::GroupPlan;

pub const DEFAULT_PORT: u16 = 8080;
/// Long enough for another model's typical answer to finish, short of clients' own timeouts.
const DEFAULT_ADMISSION_WAIT: Duration = Duration::from_secs(30);
/// Enough for many agents' conversations at once; a response holds its conversation as text,
/// so a thousand long ones stay within tens of megabytes.
const DEFAULT_RESPONSES_STORE_SIZE: usize = 1000;
/// What `corral-worker serve --max-sequences` accepts.
const MAX_SEQUENCES: RangeInclusive<usize> = 1..=256;
/// What `corral-worker serve --prefill-chunk` accepts.
const PREFILL_CHUNK: RangeInclusive<usize> = 16..=65536;

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Loopback unless the operator says otherwise.
    pub host: IpAddr,
    pub port: u16,
    pub models_dirs: Vec<PathBuf>,
    pub aliases: BTreeMap<String, String>,
    /// How long in-flight requests may run on after SIGTERM/SIGINT.
    pub drain_timeout: Duration,
    /// How long a worker may take from spawn to `Ready` (loading included).
    pub worker_start_timeout: Duration,
    /// How long a stopping worker gets after `Shutdown`, and again after SIGTERM.
    pub worker_stop_grace: Duration,
    /// How long a worker group's rank may go without a heartbeat before the group is taken for
    /// hung and ended (a rank stopped, or its host gone).
    pub group_heartbeat_timeout: Duration,
    pub state_dir: Option<PathBuf>,
    /// The `corral-worker` to spawn; by default the one installed next to `corral`.
    pub worker_binary: Option<PathBuf>,
    pub memory: MemoryConfig,
    /// Per-model settings, by model id.
    pub models: BTreeMap<String, ModelSettings>,
    /// Keys clients must present; none means the API is open (and loopback-only by default).
    pub api_keys: Vec<String>,
    /// The key for the operator routes (`/admin/*`, load, unload, `/metrics`).
    pub admin_key: Option<String>,
    /// Listen beyond loopback without an API key.
    pub allow_remote_without_key: bool,
    pub prefix_cache: PrefixCacheConfig,
    pub batching: BatchingConfig,
    pub discovery: DiscoveryConfig,
    /// How many finished Responses API responses are kept for `previous_response_id` and
    /// `GET /v1/responses/{id}`; the oldest goes first.
    pub responses_store_size: usize,
    pub images: ImagesConfig,
    pub log: LogConfig,
    /// Groups that span hosts: the other hosts, this host's key's trust, the ring's addresses.
    pub cluster: ClusterConfig,
}

/// Where `corral serve` writes its log; the file's `[log]` table. Without a `dir` it logs to
/// stderr, which suits a terminal and the journal; a service that has no journal (launchd) gets
/// a `dir`, whose files rotate by size so that months of uptime fill no disk.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// The directory of `corral.log` and its rotated predecessors; `None`: stderr.
    pub dir: Option<PathBuf>,
    /// `corral.log` is rotated before a line would take it to this size.
    pub max_bytes: u64,
    /// Files kept, `corral.log` included; the oldest rotated one goes first.
    pub keep: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            dir: None,
            max_bytes: 10 << 20,
            keep: 5,
        }
    }
}

/// A smaller limit would rotate at almost every line.
const MIN_LOG_BYTES: u64 = 4096;

/// Which libraries of other tools are searched for models, besides the models directories; the
/// file's `[discovery]` table. Each is searched where it exists.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    /// The Hugging Face cache (`$HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`).
    pub huggingface: bool,
    /// Ollama's library (`$OLLAMA_MODELS`, else `~/.ollama/models`).
    pub ollama: bool,
    /// LM Studio's folder (`~/.lmstudio/models`).
    pub lmstudio: bool,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        Self {
            huggingface: true,
            ollama: true,
            lmstudio: true,
        }
    }
}

/// How the `http(s)` image URLs of chat prompts are fetched; the file's `[images]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImagesConfig {
    /// Fetch them at all; unset, only while the server listens on loopback, since a server that
    /// others reach would fetch any address it can reach for whoever asks.
    pub fetch_urls: Option<bool>,
    /// The most bytes one fetched image may have; the download stops past it.
    pub fetch_max_bytes: u64,
    /// How long one fetch may take, the body included.
    pub fetch_timeout_secs: u64,
}

impl Default for ImagesConfig {
    fn default() -> Self {
        Self {
            fetch_urls: None,
            fetch_max_bytes: 20 * 1024 * 1024,
            fetch_timeout_secs: 10,
        }
    }
}

/// The workers' prefix KV cache; the file's `[prefix_cache]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrefixCacheConfig {
    pub enabled: bool,
    /// The SSD tier's root; `None`: `<state dir>/kv-cache`.
    pub dir: Option<PathBuf>,
    /// RAM for blocks, per worker.
    pub ram: MemoryAmount,
    /// The SSD tier's limit, per model.
    pub disk: MemoryAmount,
    pub block_tokens: usize,
    /// A model with recurrent layers keeps the state snapshot of every this-many-th block
    /// boundary (and each prompt's and sequence's last); `None`: the worker's default.
    pub snapshot_every: Option<usize>,
}

impl Default for PrefixCacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            dir: None,
            ram: MemoryAmount::Bytes(1 << 30),
            disk: MemoryAmount::Bytes(10 << 30),
            block_tokens: 256,
            snapshot_every: None,
        }
    }
}

/// How each worker batches the sequences it decodes; the file's `[batching]` table. A key left
/// unset is not passed on, and the worker's own default applies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchingConfig {
    /// Sequences decoded together in one batch; requests beyond it wait in the worker's queue.
    /// A model's own `max_sequences` wins.
    pub max_sequences: Option<usize>,
    /// Prompt tokens prefilled per forward pass, between the running sequences' decode steps.
    pub prefill_chunk: Option<usize>,
}

/// The memory budget over the sum of worker footprints.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryConfig {
    /// `None`: total RAM minus a reserve.
    pub ceiling: Option<MemoryAmount>,
    /// Over this share of the ceiling, idle workers are stopped least recently used first.
    pub soft_watermark: f64,
    /// Over this share, new loads are refused and every idle unpinned worker is stopped.
    pub hard_watermark: f64,
    pub max_loaded_models: Option<usize>,
    /// Idle workers are stopped after this long unused; `None` keeps them.
    pub idle_timeout: Option<Duration>,
    /// How long a request for a model that does not fit waits for room (a busy worker going
    /// idle, a stop finishing) before it gets 507.
    pub admission_wait: Duration,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            ceiling: None,
            soft_watermark: DEFAULT_SOFT_FRACTION,
            hard_watermark: DEFAULT_HARD_FRACTION,
            max_loaded_models: None,
            idle_timeout: None,
            admission_wait: DEFAULT_ADMISSION_WAIT,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Started with the server, never evicted or stopped for idleness, restarted after a crash.
    #[serde(default)]
    pub pinned: bool,
    /// Overrides the global idle timeout for this model.
    pub idle_timeout_secs: Option<u64>,
    /// Overrides `[batching] max_sequences` for this model.
    pub max_sequences: Option<usize>,
    /// Sampling defaults for what a request leaves out; they win over the model's own files.
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// The default answer length.
    pub max_tokens: Option<u32>,
    pub stop: Option<Vec<String>>,
    /// `auto`, `required`, `none` or a tool's name: the tool choice of a request that has tools,
    /// says nothing about the choice, and ends with a user turn.
    pub tool_choice: Option<String>,
    /// What a GGUF's tensors of the types MLX cannot hold as they are (Q2_K, Q3_K, Q6_K, IQ4_NL,
    /// IQ4_XS) become; `None`: the worker's default (8-bit).
    pub gguf_requantize: Option<GgufRequantize>,
    /// Keep a GGUF's Q4_K and Q5_K values exact (llama.cpp's bit for bit on the CPU) at 6 bits a
    /// value for Q4_K instead of 5, rather than rounding their scales to f16.
    #[serde(default)]
    pub gguf_exact_k_quants: bool,
    /// Images per request, counted before the worker is asked; `None`: the model's processor
    /// config decides, in the worker.
    pub max_images: Option<usize>,
    /// The pixels an image is resized within; `None`: the processor config's.
    pub image_max_pixels: Option<u64>,
    pub image_min_pixels: Option<u64>,
    /// How decoding guesses tokens ahead for the model to check; `None`: `draft` where a draft
    /// model is named, else the worker's way that pays for the model on its device.
    pub speculative: Option<SpeculativeMethod>,
    /// The model whose guesses the model checks (`speculative = "draft"`, or a request's): a
    /// smaller one of the same tokenizer, by id, loaded in the model's worker.
    pub draft: Option<String>,
    /// The most tokens a sequence guesses per pass; `None`: the worker's.
    pub draft_tokens: Option<u32>,
    /// The hosts whose ranks serve the model together, one rank per entry, rank 0 first; `None`
    /// or one entry: a worker of its own. `"localhost"` is a rank on this host.
    pub hosts: Option<Vec<String>>,
    /// How a group's ranks share the model: `"pipeline"`, each running a share of the layers.
    pub parallel: Option<Parallel>,
}

/// How a worker group's ranks share a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Parallel {
    Pipeline,
    Tensor,
}

/// The worker's `--gguf-requantize` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum GgufRequantize {
    #[serde(rename = "8bit")]
    Bits8,
    #[serde(rename = "6bit")]
    Bits6,
    #[serde(rename = "f16")]
    F16,
}

impl GgufRequantize {
    pub fn name(self) -> &'static str {
        match self {
            Self::Bits8 => "8bit",
            Self::Bits6 => "6bit",
            Self::F16 => "f16",
        }
    }
}

impl ModelSettings {
    /// How many ranks serve the model together.
    pub fn ranks(&self) -> usize {
        self.hosts.as_ref().map_or(1, |hosts| hosts.len().max(1))
    }

    /// How many ranks serve the model and how they split it; a group splits its layers unless
    /// `parallel` says.
    pub fn group_plan(&self) -> GroupPlan {
        let parallel = match self.parallel {
            Some(Parallel::Tensor) => "tensor",
            Some(Parallel::Pipeline) | None => "pipeline",
        };
        GroupPlan {
            hosts: self.hosts.clone().unwrap_or_default(),
            parallel,
        }
    }

    /// How the model's decoding guesses ahead, where the configuration says.
    pub fn speculation(&self) -> Option<SpeculativeMethod> {
        self.speculative
            .or(self.draft.as_ref().map(|_| SpeculativeMethod::Draft))
    }

    /// The sampling defaults this configuration sets.
    pub fn sampling(&self) -> SamplingValues {
        SamplingValues {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            max_tokens: self.max_tokens,
            stop: self.stop.clone(),
        }
    }
}

impl Config {
    /// How long `model` may sit idle before it is stopped.
    pub fn idle_timeout(&self, model: &str) -> Option<Duration> {
        match self
            .models
            .get(model)
            .and_then(|settings| settings.idle_timeout_secs)
        {
            Some(secs) => Some(Duration::from_secs(secs)),
            None => self.memory.idle_timeout,
        }
    }

    /// What `model`'s GGUF requantizes to: its own setting, else the worker's default.
    pub fn gguf_requantize(&self, model: &str) -> GgufRequantize {
        self.models
            .get(model)
            .and_then(|settings| settings.gguf_requantize)
            .unwrap_or(GgufRequantize::Bits8)
    }

    /// Whether `model`'s GGUF keeps its K-quants exact.
    pub fn gguf_exact_k_quants(&self, model: &str) -> bool {
        self.models
            .get(model)
            .is_some_and(|settings| settings.gguf_exact_k_quants)
    }

    /// How many sequences `model`'s worker decodes together; `None`: the worker's default.
    pub fn max_sequences(&self, model: &str) -> Option<usize> {
        self.models
            .get(model)
            .and_then(|settings| settings.max_sequences)
            .or(self.batching.max_sequences)
    }

    /// Whether image URLs are fetched: as configured, else only on a loopback server.
    pub fn fetches_image_urls(&self) -> bool {
        self.images
            .fetch_urls
            .unwrap_or_else(|| self.host.is_loopback())
    }

    pub fn pinned_models(&self) -> impl Iterator<Item = &str> {
        self.models
            .iter()
            .filter(|(_, settings)| settings.pinned)
            .map(|(model, _)| model.as_str())
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            host: IpAddr::from([127, 0, 0, 1]),
            port: DEFAULT_PORT,
            models_dirs: Vec::new(),
            aliases: BTreeMap::new(),
            drain_timeout: Duration::from_secs(30),
            worker_start_timeout: Duration::from_secs(120),
            worker_stop_grace: Duration::from_secs(5),
            group_heartbeat_timeout: Duration::from_secs(30),
            state_dir: None,
            worker_binary: None,
            memory: MemoryConfig::default(),
            models: BTreeMap::new(),
            api_keys: Vec::new(),
            admin_key: None,
            allow_remote_without_key: false,
            prefix_cache: PrefixCacheConfig::default(),
            batching: BatchingConfig::default(),
            discovery: DiscoveryConfig::default(),
            responses_store_size: DEFAULT_RESPONSES_STORE_SIZE,
            log: LogConfig::default(),
            images: ImagesConfig::default(),
            cluster: ClusterConfig::default(),
        }
    }
}

/// The TOML file: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    host: Option<IpAddr>,
    port: Option<u16>,
    #[serde(default)]
    models_dirs: Vec<PathBuf>,
    #[serde(default)]
    aliases: BTreeMap<String, String>,
    drain_timeout_secs: Option<u64>,
    worker_start_timeout_secs: Option<u64>,
    worker_stop_grace_secs: Option<u64>,
    group_heartbeat_timeout_secs: Option<u64>,
    state_dir: Option<PathBuf>,
    worker_binary: Option<PathBuf>,
    memory_ceiling: Option<MemoryAmount>,
    memory_soft_watermark: Option<f64>,
    memory_hard_watermark: Option<f64>,
    max_loaded_models: Option<usize>,
    idle_timeout_secs: Option<u64>,
    admission_wait_secs: Option<u64>,
    #[serde(default)]
    models: BTreeMap<String, ModelSettings>,
    #[serde(default)]
    api_keys: Vec<String>,
    admin_key: Option<String>,
    allow_remote_without_key: Option<bool>,
    #[serde(default)]
    prefix_cache: PrefixCacheConfig,
    #[serde(default)]
    batching: BatchingConfig,
    #[serde(default)]
    discovery: DiscoveryConfig,
    responses_store_size: Option<usize>,
    #[serde(default)]
    log: LogConfig,
    #[serde(default)]
    images: ImagesConfig,
    #[serde(default)]
    cluster: ClusterConfig,
}

/// Values given on the command line or in the environment.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub host: Option<IpAddr>,
    pub port: Option<u16>,
    pub models_dirs: Vec<PathBuf>,
    pub drain_timeout_secs: Option<u64>,
    pub state_dir: Option<PathBuf>,
    pub worker_binary: Option<PathBuf>,
    pub memory_ceiling: Option<MemoryAmount>,
    pub max_loaded_models: Option<usize>,
    pub idle_timeout_secs: Option<u64>,
    pub admission_wait_secs: Option<u64>,
    /// Models to pin, besides those the file pins.
    pub pinned: Vec<String>,
    /// Replace the file's API keys when not empty.
    pub api_keys: Vec<String>,
    pub admin_key: Option<String>,
    pub allow_remote_without_key: bool,
    pub prefix_cache_dir: Option<PathBuf>,
    pub log_dir: Option<PathBuf>,
}

impl Config {
    pub fn load(file: Option<&Path>, overrides: Overrides) -> Result<Self> {
        let from_file = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading config {}", path.display()))?;
                toml::from_str::<FileConfig>(&text)
                    .with_context(|| format!("parsing config {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let defaults = Self::default();
        let secs =
            |value: Option<u64>, default: Duration| value.map_or(default, Duration::from_secs);
        let models_dirs = if overrides.models_dirs.is_empty() {
            from_file.models_dirs
        } else {
            overrides.models_dirs
        };
        let memory = MemoryConfig {
            ceiling: overrides.memory_ceiling.or(from_file.memory_ceiling),
            soft_watermark: from_file
                .memory_soft_watermark
                .unwrap_or(DEFAULT_SOFT_FRACTION),
            hard_watermark: from_file
                .memory_hard_watermark
                .unwrap_or(DEFAULT_HARD_FRACTION),
            max_loaded_models: overrides.max_loaded_models.or(from_file.max_loaded_models),
            idle_timeout: overrides
                .idle_timeout_secs
                .or(from_file.idle_timeout_secs)
                .map(Duration::from_secs),
            admission_wait: secs(
                overrides
                    .admission_wait_secs
                    .or(from_file.admission_wait_secs),
                DEFAULT_ADMISSION_WAIT,
            ),
        };
        if !(0.0 < memory.soft_watermark
            && memory.soft_watermark <= memory.hard_watermark
            && memory.hard_watermark <= 1.0)
        {
            bail!(
                "memory watermarks must satisfy 0 < soft ({}) <= hard ({}) <= 1",
                memory.soft_watermark,
                memory.hard_watermark
            );
        }
        check_batching(&from_file.batching, &from_file.models)?;
        check_sampling(&from_file.models)?;
        check_speculation(&from_file.models)?;
        check_groups(&from_file.models, &from_file.cluster)?;
        check_log(&from_file.log)?;
        let mut models = from_file.models;
        for model in overrides.pinned {
            models.entry(model).or_default().pinned = true;
        }
        Ok(Self {
            host: overrides.host.or(from_file.host).unwrap_or(defaults.host),
            port: overrides.port.or(from_file.port).unwrap_or(defaults.port),
            models_dirs,
            aliases: from_file.aliases,
            drain_timeout: secs(
                overrides
                    .drain_timeout_secs
                    .or(from_file.drain_timeout_secs),
                defaults.drain_timeout,
            ),
            worker_start_timeout: secs(
                from_file.worker_start_timeout_secs,
                defaults.worker_start_timeout,
            ),
            worker_stop_grace: secs(from_file.worker_stop_grace_secs, defaults.worker_stop_grace),
            group_heartbeat_timeout: secs(
                from_file.group_heartbeat_timeout_secs,
                defaults.group_heartbeat_timeout,
            ),
            state_dir: overrides.state_dir.or(from_file.state_dir),
            worker_binary: overrides.worker_binary.or(from_file.worker_binary),
            memory,
            models,
            api_keys: if overrides.api_keys.is_empty() {
                from_file.api_keys
            } else {
                overrides.api_keys
            },
            admin_key: overrides.admin_key.or(from_file.admin_key),
            allow_remote_without_key: overrides.allow_remote_without_key
                || from_file.allow_remote_without_key.unwrap_or(false),
            prefix_cache: PrefixCacheConfig {
                dir: overrides.prefix_cache_dir.or(from_file.prefix_cache.dir),
                ..from_file.prefix_cache
            },
            batching: from_file.batching,
            discovery: from_file.discovery,
            responses_store_size: from_file
                .responses_store_size
                .unwrap_or(defaults.responses_store_size),
            log: LogConfig {
                dir: overrides.log_dir.or(from_file.log.dir),
                ..from_file.log
            },
            images: from_file.images,
            cluster: from_file.cluster,
        })
    }
}

impl Config {
    /// Model id → the draft model its worker loads beside it, for `speculative = "draft"` and
    /// for requests that ask for it.
    pub fn drafts(&self) -> std::collections::HashMap<String, String> {
        let drafts = self.models.iter().filter_map(|(model, settings)| {
            let draft = settings.draft.clone()?;
            Some((model.clone(), draft))
        });
        drafts.collect()
    }
}

/// Refuses a draft method without a draft model, and a draft model that is the model itself.
fn check_speculation(models: &BTreeMap<String, ModelSettings>) -> Result<()> {
    for (model, settings) in models {
        match (settings.speculation(), settings.draft.as_deref()) {
            (Some(SpeculativeMethod::Draft), None) => {
                bail!(
                    "[models.\"{model}\"]: speculative = \"draft\" needs a draft model (draft = \"id\")"
                )
            }
            (_, Some(draft)) if draft == model => {
                bail!(
                    "[models.\"{model}\"]: draft names the model itself; name a smaller model of its tokenizer"
                )
            }
            _ => {}
        }
    }
    Ok(())
}

/// Refuses a worker group this corral cannot start: an empty `hosts`, a host that is neither
/// this one nor in `[cluster.hosts]`, or a group spanning hosts whose rank 0 is elsewhere.
fn check_groups(models: &BTreeMap<String, ModelSettings>, cluster: &ClusterConfig) -> Result<()> {
    cluster.check().map_err(anyhow::Error::msg)?;
    for (model, settings) in models {
        let Some(hosts) = &settings.hosts else {
            continue;
        };
        if hosts.is_empty() {
            bail!("[models.\"{model}\"]: hosts is empty; name one host per rank, or leave it out");
        }
        if let Err(reason) = cluster.check_group(hosts) {
            bail!("[models.\"{model}\"]: {reason}");
        }
    }
    Ok(())
}

/// Refuses sampling defaults the worker would refuse, naming the model and the key.
fn check_sampling(models: &BTreeMap<String, ModelSettings>) -> Result<()> {
    for (model, settings) in models {
        let (_, problems) = settings.sampling().without_invalid();
        if let Some(problem) = problems.first() {
            bail!("[models.\"{model}\"]: {problem}");
        }
        if settings.tool_choice.as_deref().is_some_and(str::is_empty) {
            bail!(
                "[models.\"{model}\"]: tool_choice must be auto, required, none or a tool's name"
            );
        }
    }
    Ok(())
}

/// Refuses batching values the worker would refuse, naming the key, before any worker starts.
fn check_batching(
    batching: &BatchingConfig,
    models: &BTreeMap<String, ModelSettings>,
) -> Result<()> {
    check_range(
        "batching.max_sequences",
        batching.max_sequences,
        MAX_SEQUENCES,
    )?;
    check_range(
        "batching.prefill_chunk",
        batching.prefill_chunk,
        PREFILL_CHUNK,
    )?;
    for (model, settings) in models {
        check_range(
            &format!("models.\"{model}\".max_sequences"),
            settings.max_sequences,
            MAX_SEQUENCES,
        )?;
    }
    Ok(())
}

fn check_log(log: &LogConfig) -> Result<()> {
    if log.max_bytes < MIN_LOG_BYTES {
        bail!(
            "log.max_bytes = {} is too small: it must be at least {MIN_LOG_BYTES}",
            log.max_bytes
        );
    }
    if log.keep == 0 {
        bail!("log.keep = 0 would keep no log at all: it must be at least 1");
    }
    Ok(())
}

fn check_range(key: &str, value: Option<usize>, range: RangeInclusive<usize>) -> Result<()> {
    match value {
        Some(value) if !range.contains(&value) => bail!(
            "{key} = {value} is out of range: it must be from {} to {}",
            range.start(),
            range.end()
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
