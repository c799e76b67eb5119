//! `corral service`: run `corral serve` as a service, under launchd on macOS and systemd on
//! Linux, either per user (it runs while its user is logged in) or for the whole system (it
//! starts at boot and runs as a named user). Every action is first a `Plan` (files to write,
//! binaries to install, commands to run), so `--dry-run` prints exactly what would happen and the
//! tests check everything but the final `launchctl` or `systemctl` call.
//!
//! The service runs an installed copy of `corral` and `corral-worker` (`~/.local/bin` or
//! `/usr/local/bin`), so a rebuild or a moved checkout leaves it alone until the next `install`,
//! which stops it (a drain), swaps the binaries atomically and starts the new version. It gets
//! the options, `PATH`, `HOME` and `CORRAL_*` variables and the working directory of the
//! installing shell.

mod definition;
mod launchd;
mod plan;
mod systemd;
mod target;

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

pub use definition::{BINARIES, Definition, exit_timeout};
pub use plan::{Plan, Step};
pub use target::{Account, Platform, Scope, Target, is_root};

/// The subcommands of `corral service` that change or query the service.
pub enum Action {
    Install(Box<Definition>),
    Uninstall,
    Status,
    Start,
    Stop,
    /// A stop (with its drain), then a start.
    Restart,
}

pub fn plan(target: &Target, action: &Action) -> Result<Plan> {
    match target.platform {
        Platform::Launchd => launchd::plan(target, action),
        Platform::Systemd => systemd::plan(target, action),
    }
}

/// Where `corral service logs` reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogSource {
    /// corral's own rotated files in this directory.
    Files(PathBuf),
    /// The journal, through this `journalctl` command line.
    Journal(Vec<String>),
}

/// A directory given on the command line wins; otherwise launchd services log to their
/// platform's log directory, and systemd ones to the journal.
pub fn log_source(target: &Target, dir: Option<PathBuf>, lines: usize, follow: bool) -> LogSource {
    match (dir, target.platform) {
        (Some(dir), _) => LogSource::Files(dir),
        (None, Platform::Launchd) => LogSource::Files(launchd::log_dir(target)),
        (None, Platform::Systemd) => LogSource::Journal(systemd::journalctl(target, lines, follow)),
    }
}

/// `$HOME`: where a per-user service's definition and logs go. No fallback: guessing another
/// user's home would install the service in the wrong place.
pub fn home_dir() -> Result<PathBuf> {
    match std::env::var_os("HOME") {
        Some(home) if Path::new(&home).is_absolute() => Ok(PathBuf::from(home)),
        Some(home) => bail!("HOME ({}) is not an absolute path", home.to_string_lossy()),
        None => bail!("HOME is not set; it locates the service definition and logs"),
    }
}

/// The steps that put the built binaries in the prefix, `corral-worker` first so that a
/// `corral` never starts beside an older worker. Nothing when the built ones are the installed
/// ones (`install` run from the prefix itself).
fn install_binaries(definition: &Definition) -> Vec<Step> {
    if definition.built == definition.prefix {
        return Vec::new();
    }
    let mut steps = vec![Step::CreateDir(definition.prefix.clone())];
    steps.extend(BINARIES.iter().rev().map(|name| Step::InstallBinary {
        from: definition.built.join(name),
        to: definition.prefix.join(name),
    }));
    steps
}

#[cfg(test)]
pub(crate) mod tests;
