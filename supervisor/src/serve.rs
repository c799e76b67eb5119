//! `corral serve`: the OpenAI HTTP API over one worker process per model.
//!
//! Start-up ends workers a killed predecessor left behind, scans the models (generating the
//! default model when none is configured), and listens. SIGTERM or SIGINT stops accepting, lets
//! in-flight requests finish within the drain timeout, then stops every worker and reaps it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::activity::HISTORY_INTERVAL;
use crate::admin::{self, Admin};
use crate::auth::{self, Keys};
use crate::cluster::{Cluster, ClusterConfig, Identity};
use crate::config::{Config, ModelSettings, Overrides};
use crate::dispatch::Dispatch;
use crate::eviction::Enforcer;
use crate::memory::{Budget, format_bytes, system_memory};
use crate::metrics::{self, Metrics};
use crate::pool::{ExitOutcome, Limits, Pool};
use crate::process::{
    Described, DescribedSizes, GroupPlan, Ledger, Member, ModelLookup, RankRoom, RunDir, Spawner,
    UnloadableReport, WORKER_BINARY_NAME, WorkerExit, WorkerProcesses, reap_orphans,
};
use crate::registry::{Catalog, Fallback, Registry, SharedRegistry, Sources};
use crate::{api, dashboard, default_model, state_dir};

pub struct ServeOptions {
    pub config_file: Option<PathBuf>,
    pub overrides: Overrides,
    /// One model (a directory or a `.gguf` file) to serve besides the scanned ones.
    pub model: Option<PathBuf>,
}

pub fn run(options: ServeOptions) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(serve(options))
}

async fn serve(options: ServeOptions) -> Result<()> {
    let config = Config::load(options.config_file.as_deref(), options.overrides)?;
    if !config.host.is_loopback() && config.api_keys.is_empty() && !config.allow_remote_without_key
    {
        bail!(
            "refusing to listen on {} without an API key: anyone on the network could use the \
             models; set CORRAL_API_KEYS (or api_keys in the config), or opt in with \
             --allow-unauthenticated-remote",
            config.host
        );
    }
    let keys = Arc::new(Keys {
        api_keys: config.api_keys.clone(),
        admin_key: config.admin_key.clone(),
    });
    let state_dir = match &config.state_dir {
        Some(dir) => dir.clone(),
        None => state_dir::state_dir()?,
    };
    let run_dir = RunDir::create(&state_dir)?;
    let orphans = reap_orphans(&run_dir, WORKER_BINARY_NAME);
    if !orphans.is_empty() {
        tracing::warn!(?orphans, "ended workers left over by a previous supervisor");
    }
    let worker = worker_binary(config.worker_binary.clone())?;
    let registry =
        Arc::new(SharedRegistry::new(catalog(&config, options.model, &state_dir, &worker)?).await?);

    let config = Arc::new(config);
    let metrics = Arc::new(Metrics::new());
    let (exits, exit_events) = mpsc::unbounded_channel();
    let lookup_registry = registry.clone();
    // Only a servable model gets a worker, whichever path asks for one.
    let lookup: ModelLookup = Arc::new(move |id| {
        lookup_registry
            .current()
            .servable_path(id)
            .map(PathBuf::from)
    });
    let marking_registry = registry.clone();
    let unloadable: UnloadableReport = Arc::new(move |id, path, reason| {
        marking_registry.mark_unloadable(id, path, reason);
    });
    let batching = config.clone();
    let args_registry = registry.clone();
    let spawner = Spawner::new(worker, run_dir, lookup.clone(), exits)
        .with_unloadable_report(unloadable)
        .with_start_timeout(config.worker_start_timeout)
        .with_heartbeat_timeout(config.group_heartbeat_timeout)
        .with_worker_args(prefix_cache_args(&config, &state_dir))
        .with_ranks({
            let config = config.clone();
            Arc::new(move |model| {
                config
                    .models
                    .get(model)
                    .map_or(GroupPlan::ALONE, ModelSettings::group_plan)
            })
        })
        .with_model_args(Arc::new(move |model| model_args(&batching, model)))
        .with_drafts(config.drafts())
        .with_model_files(Arc::new(move |model, draft| {
            let mut args: Vec<std::ffi::OsString> = Vec::new();
            let projector = args_registry
                .current()
                .get(model)
                .and_then(|entry| entry.projector.clone());
            if let Some(projector) = projector {
                args.extend(["--mmproj".into(), projector.into_os_string()]);
            }
            if let Some(draft) = draft {
                // A draft that cannot be served reaches the worker as its id, whose load then
                // fails naming it.
                let path = match args_registry.current().servable_path(draft) {
                    Ok(path) => path.as_os_str().to_owned(),
                    Err(reason) => {
                        tracing::warn!(model, draft, %reason, "the draft model cannot be served");
                        draft.into()
                    }
                };
                args.extend(["--draft".into(), path]);
            }
            args
        }));
    let cluster = cluster(&config, &state_dir)?;
    let spawner = match &cluster {
        Some(cluster) => spawner.with_cluster(cluster.clone()),
        None => spawner,
    };
    let member_spawner = spawner.clone();
    let ledger = Arc::new(std::sync::Mutex::new(Ledger::new(metrics.clone())));
    let loaded_registry = registry.clone();
    let requantize = config.clone();
    let described: Described = Arc::new(move |id| {
        let registry = loaded_registry.current();
        let Some(description) = registry
            .get(id)
            .and_then(|entry| entry.description.as_ref())
        else {
            return DescribedSizes::default();
        };
        let key = corral_ipc::describe::gguf_loaded_key(
            requantize.gguf_requantize(id).name(),
            requantize.gguf_exact_k_quants(id),
        );
        DescribedSizes {
            gguf_loaded_bytes: description.gguf_loaded_bytes.get(&key).copied(),
            cache: description.cache.clone(),
            vision_reserve_bytes: description.vision_reserve_bytes,
        }
    });
    let processes =
        WorkerProcesses::new(spawner, lookup, described, config.worker_stop_grace, ledger)
            .with_drafts(config.drafts());
    let budget = budget(&config);
    let pool = Pool::new(
        processes,
        Limits {
            budget,
            max_loaded_models: config.memory.max_loaded_models,
        },
    );
    tracing::info!(
        ceiling = %format_bytes(budget.ceiling),
        soft = %format_bytes(budget.soft),
        hard = %format_bytes(budget.hard),
        "memory budget for the workers"
    );
    if let (Some(cluster), Some(address)) = (cluster, config.cluster.listen) {
        let budget = pool.clone();
        let room: RankRoom = Arc::new(move |bytes| {
            let budget = budget.clone();
            Box::pin(async move { budget.reserve(bytes).await })
        });
        Member::listen(member_spawner, cluster, address, room).await?;
    }
    let pinned = pin_models(&config, &registry.current(), &pool);
    tokio::spawn(follow_exits(
        exit_events,
        pool.clone(),
        pinned.clone(),
        config.memory.admission_wait,
        metrics.clone(),
    ));
    tokio::spawn(Enforcer::new(pool.clone(), config.clone()).run());
    for model in pinned {
        tokio::spawn(ensure_running(
            pool.clone(),
            model,
            config.memory.admission_wait,
        ));
    }

    let backend = Arc::new(Dispatch::new(
        registry.clone(),
        pool.clone(),
        metrics.clone(),
        config.clone(),
    ));
    let admin = Arc::new(Admin {
        pool: pool.clone(),
        registry: registry.clone(),
        config: config.clone(),
        metrics: metrics.clone(),
    });
    let images = api::ImageFetch::new(
        config.fetches_image_urls(),
        config.images.fetch_max_bytes,
        Duration::from_secs(config.images.fetch_timeout_secs),
    )
    .context("building the HTTP client that fetches image URLs")?;
    tokio::spawn(sample_history(pool.clone(), metrics.clone()));
    let activity = metrics.activity.clone();
    let app = api::router(backend, config.responses_store_size, images)
        .merge(admin::router(admin))
        .merge(dashboard::router())
        .route(
            "/admin/access",
            axum::routing::get(auth::access).with_state(keys.clone()),
        )
        .layer(axum::middleware::from_fn_with_state(
            keys,
            auth::require_key,
        ))
        // Outermost, so every answer counts, whichever layer gave it.
        .layer(axum::middleware::from_fn_with_state(
            metrics,
            metrics::track_requests,
        ));
    let address = (config.host, config.port);
    let shutdown = shutdown_signal();
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("listening on {}:{}", config.host, config.port))?;
    let local = listener.local_addr().context("reading the bound address")?;
    // Streams write small chunks; with Nagle's algorithm the first token's chunk waits for the
    // client's delayed ACK of the headers (up to 40 ms) when the prefill is shorter than that.
    let listener = listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "setting TCP_NODELAY");
        }
    });
    let current = registry.current();
    let models: Vec<&str> = current
        .entries()
        .filter(|entry| entry.is_servable())
        .map(|entry| entry.id.as_str())
        .collect();
    tracing::info!(?models, "listening on http://{local}");

    let (stopping, mut stop_seen) = watch::channel(false);
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        tracing::info!("shutting down: no new requests; draining those in flight");
        activity.close();
        let _ = stopping.send(true);
    });
    let drain = config.drain_timeout;
    tokio::select! {
        served = server => served.context("serving HTTP")?,
        () = async {
            let _ = stop_seen.wait_for(|stopping| *stopping).await;
            tokio::time::sleep(drain).await;
        } => tracing::warn!(?drain, "drain timeout: stopping workers with requests in flight"),
    }
    pool.stop_all().await;
    tracing::info!("stopped");
    Ok(())
}

/// The prefix cache's settings as `corral-worker serve` options; the SSD tier lives under the
/// state directory unless configured elsewhere.
fn prefix_cache_args(config: &Config, state_dir: &std::path::Path) -> Vec<std::ffi::OsString> {
    let cache = &config.prefix_cache;
    if !cache.enabled {
        return vec!["--no-prefix-cache".into()];
    }
    let total = crate::memory::system_memory().total;
    let dir = cache
        .dir
        .clone()
        .unwrap_or_else(|| state_dir.join("kv-cache"));
    let mut args: Vec<std::ffi::OsString> = vec![
        "--prefix-cache-dir".into(),
        dir.into_os_string(),
        "--prefix-cache-ram".into(),
        cache.ram.resolve(total).to_string().into(),
        "--prefix-cache-disk".into(),
        cache.disk.resolve(total).to_string().into(),
        "--prefix-block-tokens".into(),
        cache.block_tokens.to_string().into(),
    ];
    if let Some(every) = cache.snapshot_every {
        args.extend(["--prefix-snapshot-every".into(), every.to_string().into()]);
    }
    args
}

/// This host's part in groups that span hosts, where `[cluster]` gives it one: its key, made on
/// first use, and the other hosts.
fn cluster(config: &Config, state_dir: &Path) -> Result<Option<Arc<Cluster>>> {
    if config.cluster == ClusterConfig::default() {
        return Ok(None);
    }
    let identity = Identity::load_or_create(state_dir)?;
    Ok(Some(Arc::new(Cluster::new(
        identity,
        config.cluster.clone(),
    ))))
}

/// `model`'s batching, GGUF and image settings as `corral-worker serve` options; an unset one is
/// left out, so the worker's own default applies. None names a file: a coordinator sends them
/// to the ranks other hosts run for it.
fn model_args(config: &Config, model: &str) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(count) = config.max_sequences(model) {
        args.extend(["--max-sequences".into(), count.to_string()]);
    }
    if let Some(tokens) = config.batching.prefill_chunk {
        args.extend(["--prefill-chunk".into(), tokens.to_string()]);
    }
    if let Some(requantize) = config
        .models
        .get(model)
        .and_then(|settings| settings.gguf_requantize)
    {
        args.extend(["--gguf-requantize".into(), requantize.name().into()]);
    }
    if config.gguf_exact_k_quants(model) {
        args.push("--gguf-exact-k-quants".into());
    }
    if let Some(settings) = config.models.get(model) {
        let limits = [
            (
                "--max-images",
                settings.max_images.map(|count| count as u64),
            ),
            ("--image-max-pixels", settings.image_max_pixels),
            ("--image-min-pixels", settings.image_min_pixels),
            ("--draft-tokens", settings.draft_tokens.map(u64::from)),
        ];
        for (flag, value) in limits {
            if let Some(value) = value {
                args.extend([flag.into(), value.to_string()]);
            }
        }
        if let Some(method) = settings.speculation() {
            args.extend(["--speculative".into(), method.name().into()]);
        }
    }
    args
}

/// The memory budget the configuration asks for, on this machine.
fn budget(config: &Config) -> Budget {
    let total = system_memory().total;
    let ceiling = config.memory.ceiling.map_or_else(
        || Budget::for_total(total).ceiling,
        |amount| amount.resolve(total),
    );
    Budget::new(
        ceiling,
        config.memory.soft_watermark,
        config.memory.hard_watermark,
    )
}

/// Marks the configured pinned models in the pool; returns their canonical ids. A pinned name
/// that is no model is logged and skipped.
fn pin_models(config: &Config, registry: &Registry, pool: &Pool<WorkerProcesses>) -> Vec<String> {
    let mut pinned = Vec::new();
    for name in config.pinned_models() {
        match registry.resolve(name).and_then(|id| registry.get(id)) {
            Some(entry) if !entry.is_servable() => tracing::warn!(
                model = name,
                reason = entry.unservable_reason(),
                "a pinned model that cannot be served is ignored"
            ),
            Some(entry) => {
                pool.set_pinned(&entry.id, true);
                pinned.push(entry.id.clone());
            }
            None => tracing::warn!(
                model = name,
                "a pinned model that does not exist is ignored"
            ),
        }
    }
    pinned
}

/// Feeds every worker exit to the pool, and restarts a pinned model whose worker crashed once
/// its backoff allows.
/// Every [`HISTORY_INTERVAL`], a sample of the dashboard's last hour, with what the workers
/// hold then.
async fn sample_history(pool: Pool<WorkerProcesses>, metrics: Arc<Metrics>) {
    let mut ticks = tokio::time::interval(HISTORY_INTERVAL);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let used = pool.usage().iter().map(|worker| worker.bytes).sum();
        metrics.activity.sample(used);
    }
}

async fn follow_exits(
    mut exits: mpsc::UnboundedReceiver<WorkerExit>,
    pool: Pool<WorkerProcesses>,
    pinned: Vec<String>,
    admission_wait: Duration,
    metrics: Arc<Metrics>,
) {
    while let Some(exit) = exits.recv().await {
        let outcome = pool.on_exit(&exit.model, exit.pid, exit.status);
        metrics.record_exit(&exit.model, outcome.cause(exit.status));
        let (model, status) = (exit.model.clone(), exit.status);
        exit.noted();
        if let ExitOutcome::Crashed { backoff } = outcome
            && pinned.contains(&model)
        {
            let pool = pool.clone();
            tokio::spawn(async move {
                tokio::time::sleep(backoff.unwrap_or_default()).await;
                tracing::info!(model, %status, "restarting a pinned model after its crash");
                ensure_running(pool, model, admission_wait).await;
            });
        }
    }
}

/// Starts `model` (a pinned one) through admission like any request and waits until it is
/// ready, holding no lease afterwards. A failure is logged; the next request or crash tries again.
async fn ensure_running(pool: Pool<WorkerProcesses>, model: String, admission_wait: Duration) {
    if let Err(error) = pool.acquire(&model, admission_wait).await {
        tracing::warn!(model, %error, "cannot start a pinned model");
    }
}

/// Where models are looked for (the configured sources, located through this process's
/// environment), and the generated default model when none is found.
fn catalog(
    config: &Config,
    model: Option<PathBuf>,
    state_dir: &std::path::Path,
    worker: &std::path::Path,
) -> Result<Catalog> {
    let state_dir = state_dir.to_path_buf();
    let fallback: Fallback = Arc::new(move || default_model::ensure(&state_dir));
    Ok(Catalog {
        sources: Sources::locate(config, model, &|name| std::env::var_os(name))?,
        aliases: config.aliases.clone(),
        worker: worker.to_path_buf(),
        fallback: Some(fallback),
    })
}

/// SIGTERM or SIGINT, listened for from before the server announces itself: a service manager
/// that stops corral right after "listening on" gets the drain, not the default disposition.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut terminate), Ok(mut interrupt)) = signals else {
            tracing::error!("cannot listen for SIGTERM/SIGINT; stop corral with SIGKILL");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    }
}

/// The configured worker, else the one installed next to the supervisor.
fn worker_binary(configured: Option<PathBuf>) -> Result<PathBuf> {
    let worker = match configured {
        Some(worker) => worker,
        None => std::env::current_exe()
            .context("locating the corral executable")?
            .with_file_name(format!("corral-worker{}", std::env::consts::EXE_SUFFIX)),
    };
    if !worker.exists() {
        bail!(
            "{} is missing; build it with the supervisor",
            worker.display()
        );
    }
    Ok(worker)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BatchingConfig, GgufRequantize, ModelSettings};
    use corral_ipc::SpeculativeMethod;

    #[test]
    fn model_args_carry_a_models_own_max_sequences_over_the_global_one() {
        let mut config = Config::default();
        assert!(model_args(&config, "any").is_empty());

        config.batching = BatchingConfig {
            max_sequences: Some(8),
            prefill_chunk: Some(512),
        };
        config.models.insert(
            "solo".to_owned(),
            ModelSettings {
                max_sequences: Some(1),
                ..ModelSettings::default()
            },
        );
        assert_eq!(
            model_args(&config, "solo"),
            ["--max-sequences", "1", "--prefill-chunk", "512"]
        );
        assert_eq!(
            model_args(&config, "other"),
            ["--max-sequences", "8", "--prefill-chunk", "512"]
        );

        config.batching.max_sequences = None;
        assert_eq!(model_args(&config, "other"), ["--prefill-chunk", "512"]);
    }

    #[test]
    fn every_setting_a_coordinator_sends_a_member_host_is_one_it_takes() {
        let mut config = Config {
            batching: BatchingConfig {
                max_sequences: Some(8),
                prefill_chunk: Some(512),
            },
            ..Config::default()
        };
        config.models.insert(
            "all".to_owned(),
            ModelSettings {
                gguf_requantize: Some(GgufRequantize::F16),
                gguf_exact_k_quants: true,
                max_images: Some(3),
                image_max_pixels: Some(1_003_520),
                image_min_pixels: Some(3136),
                draft_tokens: Some(4),
                speculative: Some(SpeculativeMethod::Ngram),
                ..ModelSettings::default()
            },
        );
        let flags = model_args(&config, "all");
        assert_eq!(flags.len(), 17, "{flags:?}");
        assert_eq!(crate::process::check_flags(&flags), Ok(()));
    }

    #[test]
    fn a_models_gguf_requantize_reaches_its_worker_only() {
        let mut config = Config::default();
        config.models.insert(
            "q6".to_owned(),
            ModelSettings {
                gguf_requantize: Some(GgufRequantize::Bits6),
                ..ModelSettings::default()
            },
        );
        config.models.insert(
            "exact".to_owned(),
            ModelSettings {
                gguf_exact_k_quants: true,
                ..ModelSettings::default()
            },
        );
        assert_eq!(model_args(&config, "q6"), ["--gguf-requantize", "6bit"]);
        assert_eq!(model_args(&config, "exact"), ["--gguf-exact-k-quants"]);
        assert!(model_args(&config, "other").is_empty());
    }

    #[test]
    fn a_models_image_limits_reach_its_worker_and_unset_ones_stay_the_processors() {
        let mut config = Config::default();
        config.models.insert(
            "vl".to_owned(),
            ModelSettings {
                max_images: Some(3),
                image_max_pixels: Some(1_003_520),
                ..ModelSettings::default()
            },
        );
        assert_eq!(
            model_args(&config, "vl"),
            ["--max-images", "3", "--image-max-pixels", "1003520"]
        );
        config.models.insert(
            "small".to_owned(),
            ModelSettings {
                image_min_pixels: Some(3136),
                ..ModelSettings::default()
            },
        );
        assert_eq!(model_args(&config, "small"), ["--image-min-pixels", "3136"]);
        config.models.insert(
            "fast".to_owned(),
            ModelSettings {
                speculative: Some(SpeculativeMethod::Ngram),
                draft_tokens: Some(6),
                ..ModelSettings::default()
            },
        );
        assert_eq!(
            model_args(&config, "fast"),
            ["--draft-tokens", "6", "--speculative", "ngram"]
        );
        assert!(model_args(&config, "other").is_empty());
    }
}
