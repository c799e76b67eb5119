//! The Python virtualenv with the official client SDKs (`openai`, `anthropic`) that the
//! end-to-end tests drive corral with, in `build/sdk/`.
//!
//! Every package is pinned in `tests/sdk/requirements.txt`; the environment is rebuilt when that
//! file changes (its hash is kept beside the environment), and built into a scratch directory
//! first, so an interrupted install never leaves a half environment in place.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::paths::Paths;
use crate::wheel::{path_str, python};

const REQUIREMENTS: &str = "tests/sdk/requirements.txt";
/// Where the tests look for it (`corral_tests::sdk`), under the workspace root.
const VENV: &str = "build/sdk";
const STAMP: &str = "requirements.sha256";

/// Makes sure the environment matches the requirements; returns its directory.
pub fn ensure(paths: &Paths) -> Result<PathBuf> {
    let requirements = paths.root.join(REQUIREMENTS);
    let wanted = requirements_hash(&requirements)?;
    let venv = paths.root.join(VENV);
    if std::fs::read_to_string(venv.join(STAMP)).is_ok_and(|stamp| stamp == wanted) {
        return Ok(venv);
    }
    eprintln!("xtask: installing the client SDKs of {REQUIREMENTS} into {VENV}");
    let staging = paths.root.join("build").join("sdk-staging");
    let _ = std::fs::remove_dir_all(&staging);
    // Copies rather than symlinks: the environment is renamed into place afterwards.
    python(&["-m", "venv", "--copies", path_str(&staging)?])?;
    let pip = staging.join("bin").join("pip");
    let status = std::process::Command::new(&pip)
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&requirements)
        .status()
        .with_context(|| format!("running {}", pip.display()))?;
    if !status.success() {
        bail!("installing {REQUIREMENTS} failed with {status}");
    }
    std::fs::write(staging.join(STAMP), &wanted)
        .with_context(|| format!("writing {}", staging.join(STAMP).display()))?;
    let _ = std::fs::remove_dir_all(&venv);
    std::fs::rename(&staging, &venv)
        .with_context(|| format!("moving the environment to {}", venv.display()))?;
    Ok(venv)
}

fn requirements_hash(path: &Path) -> Result<String> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Sha256::digest(text)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect())
}
