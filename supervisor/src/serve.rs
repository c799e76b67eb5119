//! `corral serve`. Until the HTTP supervisor lands, it resolves the model (the generated default
//! when none is given) and runs one chat generation through a `corral-worker` process, which is
//! how the worker's engine is exercised end to end from the README.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{default_model, state_dir};

pub struct ServeOptions {
    pub model: Option<PathBuf>,
    pub prompt: String,
    pub max_tokens: usize,
}

pub fn run(options: ServeOptions) -> Result<()> {
    let model = match options.model {
        Some(model) => model,
        None => default_model::ensure(&state_dir::state_dir()?)?,
    };
    let worker = worker_binary()?;
    tracing::info!(model = %model.display(), worker = %worker.display(), "the HTTP API is not built yet; running one generation with the worker");
    let status = Command::new(&worker)
        .arg("generate")
        .arg("--model")
        .arg(&model)
        .args(["--chat", "--prompt", &options.prompt])
        .args(["--max-tokens", &options.max_tokens.to_string()])
        .status()
        .with_context(|| format!("starting {}", worker.display()))?;
    if !status.success() {
        bail!("{} ended with {status}", worker.display());
    }
    Ok(())
}

/// Workers are installed next to the supervisor.
fn worker_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the corral executable")?;
    let worker = exe.with_file_name(format!("corral-worker{}", std::env::consts::EXE_SUFFIX));
    if !worker.exists() {
        bail!(
            "{} is missing; build it with the supervisor",
            worker.display()
        );
    }
    Ok(worker)
}
