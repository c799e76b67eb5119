//! sha256 pins of downloaded files: a file whose hash differs from its pin is never used.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

pub fn verify(path: &Path, expected: &str) -> Result<()> {
    let actual = hex_digest(path)?;
    if actual != expected {
        bail!(
            "{} has sha256 {actual}, but {expected} is pinned; refusing to use it",
            path.display()
        );
    }
    Ok(())
}

fn hex_digest(path: &Path) -> Result<String> {
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).with_context(|| format!("reading {}", path.display()))?;
    Ok(hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect())
}
