//! The model served when none is configured. First the real instruct model that
//! `CORRAL_DEFAULT_MODEL` names (`cargo xtask serve` points it at the set-up's
//! SmolLM2-135M-Instruct GGUF), so that a newcomer's first question gets a real answer. Without
//! it, the `small` fixture, generated once into the state directory: random weights, whose
//! answers are noise, which the log says. Generation goes to a temporary sibling that is renamed
//! into place, so an interrupted first start never leaves a half-written model behind.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};

/// The variable naming the default model (a model directory or a GGUF file).
pub const DEFAULT_MODEL_VAR: &str = "CORRAL_DEFAULT_MODEL";
pub const GENERATED_ID: &str = "corral-small";

/// The default model's id and path.
pub fn ensure(state_dir: &Path) -> Result<(String, PathBuf)> {
    if let Some(path) = std::env::var_os(DEFAULT_MODEL_VAR).map(PathBuf::from) {
        if let Some(id) = path.exists().then(|| id_of(&path)).flatten() {
            tracing::info!(model = %id, path = %path.display(), "no model configured; serving the default model");
            return Ok((id, path));
        }
        tracing::warn!(path = %path.display(), "{DEFAULT_MODEL_VAR} names no model; falling back to the generated one");
    } else {
        tracing::warn!(
            "no model configured and {DEFAULT_MODEL_VAR} unset (`cargo xtask serve` sets it to SmolLM2-135M-Instruct); serving the generated random-weight model, whose answers are noise"
        );
    }
    generated(state_dir).map(|dir| (GENERATED_ID.to_owned(), dir))
}

/// `SmolLM2-135M-Instruct.Q4_1.gguf` → `SmolLM2-135M-Instruct`: the name up to its first dot.
fn id_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let id = name.split('.').next().unwrap_or(name);
    (!id.is_empty()).then(|| id.to_owned())
}

fn generated(state_dir: &Path) -> Result<PathBuf> {
    let models = state_dir.join("models");
    let dir = models.join(GENERATED_ID);
    if dir.join("config.json").exists() {
        tracing::info!(model = %dir.display(), "no model configured; serving the generated default model");
        return Ok(dir);
    }
    std::fs::create_dir_all(&models).with_context(|| format!("creating {}", models.display()))?;
    let staging = models.join(format!(".{GENERATED_ID}.{}", std::process::id()));
    let options = FixtureOptions {
        size: Size::Small,
        arch: Arch::Llama,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    tracing::info!(model = %dir.display(), "no model configured; generating the default model ({options}) once");
    corral_fixture::generate(&options, &staging)?;
    std::fs::rename(&staging, &dir)
        .with_context(|| format!("moving {} to {}", staging.display(), dir.display()))?;
    Ok(dir)
}
