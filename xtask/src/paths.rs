//! Where setup keeps its outputs: inside the repository's ignored `build/` directory.

use std::path::PathBuf;

use anyhow::{Context, Result};

pub struct Paths {
    pub root: PathBuf,
    pub mlx: PathBuf,
}

impl Paths {
    pub fn discover() -> Result<Self> {
        let xtask_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let root = xtask_dir
            .parent()
            .context("xtask has no parent directory")?
            .to_path_buf();
        let mlx = root.join("build").join("mlx");
        std::fs::create_dir_all(&mlx).with_context(|| format!("creating {}", mlx.display()))?;
        Ok(Self { root, mlx })
    }
}

/// The Debian multiarch name of this machine, e.g. `x86_64-linux-gnu`.
pub fn multiarch() -> String {
    format!("{}-linux-gnu", std::env::consts::ARCH)
}

/// The Rust target triple cargo uses for host builds here.
pub fn rust_target() -> String {
    format!("{}-unknown-linux-gnu", std::env::consts::ARCH)
}
