//! The Debian packages that the Linux MLX build needs, and the browser and its WebDriver that the
//! dashboard's tests drive, installed only when missing.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::paths::multiarch;

/// A package and the file whose presence proves it is installed.
struct Requirement {
    package: &'static str,
    present: fn() -> bool,
}

const REQUIREMENTS: &[Requirement] = &[
    Requirement {
        package: "cmake",
        present: || on_path("cmake"),
    },
    Requirement {
        package: "g++",
        present: || on_path("g++"),
    },
    Requirement {
        package: "libclang-dev",
        present: libclang_present,
    },
    Requirement {
        package: "libopenblas0-pthread",
        present: || openblas_library().exists(),
    },
    Requirement {
        package: "chromium",
        present: || on_path("chromium"),
    },
    Requirement {
        package: "chromium-driver",
        present: || on_path("chromedriver"),
    },
];

/// Debian's OpenBLAS; linked ahead of the wheel's reference BLAS (about 50x faster matmuls).
pub fn openblas_library() -> std::path::PathBuf {
    Path::new("/usr/lib")
        .join(multiarch())
        .join("openblas-pthread")
        .join("libopenblas.so.0")
}

pub fn ensure() -> Result<()> {
    let missing: Vec<&str> = REQUIREMENTS
        .iter()
        .filter(|requirement| !(requirement.present)())
        .map(|requirement| requirement.package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !on_path("apt-get") {
        bail!(
            "missing system packages {missing:?} and no apt-get to install them; install them by hand"
        );
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    apt_get(&["update", "-q"])?;
    let mut install = vec!["install", "-y", "-q", "--no-install-recommends"];
    install.extend(&missing);
    apt_get(&install)
}

fn apt_get(args: &[&str]) -> Result<()> {
    let as_root = is_root();
    let mut command = if as_root {
        Command::new("apt-get")
    } else {
        let mut sudo = Command::new("sudo");
        sudo.arg("apt-get");
        sudo
    };
    let status = command
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .with_context(|| format!("running apt-get {args:?}"))?;
    if !status.success() {
        bail!("apt-get {} failed with {status}", args.join(" "));
    }
    Ok(())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|output| output.stdout.trim_ascii() == b"0")
        .unwrap_or(false)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

fn libclang_present() -> bool {
    let Ok(entries) = std::fs::read_dir("/usr/lib") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        name.to_string_lossy().starts_with("llvm-") && entry.path().join("lib/libclang.so").exists()
    })
}
