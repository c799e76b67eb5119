//! The agent CLIs the client conformance tests run against corral (Claude Code, Codex,
//! opencode), installed with npm into `build/clients/` from `tests/clients/package.json`, which
//! pins each to an exact version (their native binaries are optional dependencies pinned exactly
//! by each package; no lock file, since npm writes only this platform's into one and `npm ci`
//! then refuses it elsewhere).
//!
//! Only where npm exists: without it the tests that need the CLIs skip and say why. The install
//! is redone when the manifest changes (its hash is kept beside it), into a scratch directory
//! first, so an interrupted install never leaves half the CLIs in place.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::paths::Paths;

const SOURCE: &str = "tests/clients";
/// Where the tests look for them (`corral_tests::clients`), under the workspace root.
const INSTALLED: &str = "build/clients";
const STAMP: &str = "package.sha256";

/// Installs the pinned CLIs unless they are there already; returns their directory, or `None`
/// when npm is missing.
pub fn ensure(paths: &Paths) -> Result<Option<PathBuf>> {
    let source = paths.root.join(SOURCE);
    let manifest = std::fs::read(source.join("package.json"))
        .with_context(|| format!("reading {SOURCE}/package.json"))?;
    let wanted: String = Sha256::digest(&manifest)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let installed = paths.root.join(INSTALLED);
    if std::fs::read_to_string(installed.join(STAMP)).is_ok_and(|stamp| stamp == wanted) {
        return Ok(Some(installed));
    }
    let has_npm = Command::new("npm")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !has_npm {
        eprintln!("xtask: npm not found; the tests of the agent CLIs will be skipped");
        return Ok(None);
    }
    eprintln!("xtask: installing the agent CLIs of {SOURCE}/package.json into {INSTALLED}");
    let staging = paths.root.join("build").join("clients-staging");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    std::fs::write(staging.join("package.json"), &manifest)
        .with_context(|| format!("writing {}", staging.join("package.json").display()))?;
    let status = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&staging)
        .status()
        .context("running npm install")?;
    if !status.success() {
        bail!("npm install in {} failed with {status}", staging.display());
    }
    std::fs::write(staging.join(STAMP), &wanted)
        .with_context(|| format!("writing {}", staging.join(STAMP).display()))?;
    let _ = std::fs::remove_dir_all(&installed);
    std::fs::rename(&staging, &installed)
        .with_context(|| format!("moving the CLIs to {}", installed.display()))?;
    Ok(Some(installed))
}
