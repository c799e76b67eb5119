//! corral's state directory: generated default models now, worker records and sockets later.
//!
//! `CORRAL_STATE_DIR` wins; otherwise the platform's convention (XDG state on Linux, Application
//! Support on macOS), so a launchd daemon and a shell session find the same place.

use std::path::PathBuf;

use anyhow::{Context, Result};

pub fn state_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CORRAL_STATE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .context("neither CORRAL_STATE_DIR nor HOME is set")?;
    if cfg!(target_os = "macos") {
        return Ok(home.join("Library/Application Support/corral"));
    }
    let state_home = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".local/state"));
    Ok(state_home.join("corral"))
}
