//! `corral service`: run `corral serve` as a per-user service, under launchd on macOS and a
//! systemd user unit on Linux. Every action is first a `Plan` (files to write, commands to run),
//! so `--dry-run` prints exactly what would happen and the tests check everything but the final
//! `launchctl` or `systemctl` call.
//!
//! The service runs what `corral serve` would run from the installing shell: the same executable
//! (its `corral-worker` sits next to it), the same options, `PATH`, `HOME` and `CORRAL_*`
//! variables, and the same working directory, so relative paths mean what they meant there.

mod launchd;
mod plan;
mod systemd;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::config::Config;

pub use plan::{Plan, Step};

/// The service manager to write for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Platform {
    Launchd,
    Systemd,
}

impl Platform {
    pub fn native() -> Self {
        if cfg!(target_os = "macos") {
            Platform::Launchd
        } else {
            Platform::Systemd
        }
    }

    /// launchd wants a reverse-DNS label; a systemd unit is named for what it runs.
    pub fn default_label(self) -> &'static str {
        match self {
            Platform::Launchd => "com.corral.server",
            Platform::Systemd => "corral",
        }
    }
}

/// Whose service, and under which name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub platform: Platform,
    /// The launchd label or the systemd unit name (without `.service`).
    pub label: String,
    pub home: PathBuf,
    pub uid: u32,
}

impl Target {
    pub fn new(platform: Platform, label: Option<String>, home: PathBuf, uid: u32) -> Result<Self> {
        let label = label.unwrap_or_else(|| platform.default_label().to_string());
        // The label becomes a file name and a launchctl service path.
        let allowed = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
        if label.is_empty() || label.starts_with('.') || !label.chars().all(allowed) {
            bail!("service label {label:?} must be letters, digits, '.', '_' or '-'");
        }
        Ok(Self {
            platform,
            label,
            home,
            uid,
        })
    }
}

/// What the installed service runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    /// The absolute `corral` executable, `serve`, then the serve options.
    pub program: Vec<String>,
    pub environment: BTreeMap<String, String>,
    pub working_directory: String,
    /// How long the service manager waits after SIGTERM before it sends SIGKILL.
    pub exit_timeout: Duration,
}

impl Definition {
    /// The service for this process's executable, environment and directory, serving with
    /// `serve_args` (already loaded into `config`).
    pub fn for_this_process(serve_args: &[String], config: &Config) -> Result<Self> {
        let exe = std::env::current_exe().context("finding the corral executable")?;
        let exe = exe
            .canonicalize()
            .with_context(|| format!("resolving {}", exe.display()))?;
        let cwd = std::env::current_dir().context("reading the current directory")?;
        let mut program = vec![text(&exe)?, "serve".to_string()];
        program.extend(serve_args.iter().cloned());
        Ok(Self {
            program,
            environment: carried_environment(std::env::vars_os())?,
            working_directory: text(&cwd)?,
            exit_timeout: exit_timeout(config),
        })
    }
}

/// The subcommands of `corral service`.
pub enum Action {
    Install(Definition),
    Uninstall,
    Status,
    Start,
    Stop,
}

pub fn plan(target: &Target, action: &Action) -> Result<Plan> {
    match target.platform {
        Platform::Launchd => launchd::plan(target, action),
        Platform::Systemd => systemd::plan(target, action),
    }
}

/// `$HOME`: where the service definition and logs go. No fallback: guessing another user's home
/// would install the service in the wrong place.
pub fn home_dir() -> Result<PathBuf> {
    match std::env::var_os("HOME") {
        Some(home) if Path::new(&home).is_absolute() => Ok(PathBuf::from(home)),
        Some(home) => bail!("HOME ({}) is not an absolute path", home.to_string_lossy()),
        None => bail!("HOME is not set; it locates the service definition and logs"),
    }
}

/// Time for a stop to finish on its own: the drain, then a worker's two grace periods (after
/// `Shutdown`, then after SIGTERM), then a margin for reaping and exiting.
pub fn exit_timeout(config: &Config) -> Duration {
    config.drain_timeout + 2 * config.worker_stop_grace + Duration::from_secs(5)
}

/// The variables the service gets: `PATH`, `HOME` and every `CORRAL_*` (the service manager
/// starts it with almost none of the shell's).
fn carried_environment(
    vars: impl Iterator<Item = (OsString, OsString)>,
) -> Result<BTreeMap<String, String>> {
    let mut carried = BTreeMap::new();
    for (name, value) in vars {
        let Some(name) = name.to_str() else { continue };
        if name == "PATH" || name == "HOME" || name.starts_with("CORRAL_") {
            let value = value
                .into_string()
                .map_err(|_| anyhow::anyhow!("environment variable {name} is not UTF-8"))?;
            carried.insert(name.to_string(), value);
        }
    }
    Ok(carried)
}

/// Service definitions are text: a path that is not UTF-8 cannot be written into one.
fn text(path: &Path) -> Result<String> {
    path.to_str()
        .map(str::to_string)
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_path_home_and_corral_variables_are_carried() {
        let vars = [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/Users/a"),
            ("CORRAL_PORT", "9000"),
            ("TERM", "xterm"),
            ("XCORRAL_PORT", "1"),
        ]
        .map(|(name, value)| (OsString::from(name), OsString::from(value)));
        let carried = carried_environment(vars.into_iter()).unwrap();
        assert_eq!(
            carried.into_iter().collect::<Vec<_>>(),
            [
                ("CORRAL_PORT".to_string(), "9000".to_string()),
                ("HOME".to_string(), "/Users/a".to_string()),
                ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ]
        );
    }

    #[test]
    fn exit_timeout_outlasts_the_drain_and_the_worker_stops() {
        let config = Config {
            drain_timeout: Duration::from_secs(30),
            worker_stop_grace: Duration::from_secs(5),
            ..Config::default()
        };
        assert_eq!(exit_timeout(&config), Duration::from_secs(45));
    }

    #[test]
    fn labels_that_are_not_file_names_are_refused() {
        let target =
            |label: &str| Target::new(Platform::Launchd, Some(label.into()), "/h".into(), 501);
        assert!(target("com.example.corral-2").is_ok());
        for label in ["", "../x", "a/b", ".hidden", "a b"] {
            assert!(target(label).is_err(), "{label:?}");
        }
        let default = Target::new(Platform::Systemd, None, "/h".into(), 1000).unwrap();
        assert_eq!(default.label, "corral");
    }
}
