//! The model served when none is configured: the `small` fixture, generated once into the state
//! directory. Generation goes to a temporary sibling that is renamed into place, so an
//! interrupted first start never leaves a half-written model behind.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};

const NAME: &str = "corral-small";

pub fn ensure(state_dir: &Path) -> Result<PathBuf> {
    let models = state_dir.join("models");
    let dir = models.join(NAME);
    if dir.join("config.json").exists() {
        tracing::info!(model = %dir.display(), "no model configured; serving the generated default model");
        return Ok(dir);
    }
    std::fs::create_dir_all(&models).with_context(|| format!("creating {}", models.display()))?;
    let staging = models.join(format!(".{NAME}.{}", std::process::id()));
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
