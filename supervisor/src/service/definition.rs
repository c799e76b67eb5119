//! What the installed service runs: the installed copy of `corral` (its `corral-worker` beside
//! it, where `corral serve` looks for it), the serve options, the environment and directory of
//! the installing shell, and the directories the service must be able to write.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{Scope, Target};
use crate::config::Config;
use crate::process::WORKER_BINARY_NAME;

/// The two executables `install` copies, by file name.
pub const BINARIES: [&str; 2] = ["corral", WORKER_BINARY_NAME];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    /// The installed `corral`, `serve`, then the serve options.
    pub program: Vec<String>,
    pub environment: BTreeMap<String, String>,
    pub working_directory: String,
    /// How long the service manager waits after SIGTERM before it sends SIGKILL.
    pub exit_timeout: Duration,
    /// The directory of the built `corral` and `corral-worker` that `install` copies.
    pub built: PathBuf,
    /// Where they are copied to; `program[0]` is in it.
    pub prefix: PathBuf,
    /// The state directory the service will use (its worker sockets are under it).
    pub state_dir: String,
    /// Other directories it writes: a configured log or prefix cache directory.
    pub writable: Vec<String>,
    /// The configured `[log] dir`, if any.
    pub log_dir: Option<String>,
}

impl Definition {
    /// The service for this process's executable, environment and directory, serving with
    /// `serve_args` (already loaded into `config`), installed into `prefix`.
    pub fn for_this_process(
        target: &Target,
        serve_args: &[String],
        config: &Config,
        prefix: &Path,
    ) -> Result<Self> {
        let exe = std::env::current_exe().context("finding the corral executable")?;
        let exe = exe
            .canonicalize()
            .with_context(|| format!("resolving {}", exe.display()))?;
        let built = exe
            .parent()
            .with_context(|| format!("{} has no directory", exe.display()))?
            .to_path_buf();
        let worker = built.join(WORKER_BINARY_NAME);
        if !worker.is_file() {
            bail!(
                "{} is missing: install copies it with corral; build it with the supervisor",
                worker.display()
            );
        }
        if !prefix.is_absolute() {
            bail!("the prefix {} is not an absolute path", prefix.display());
        }
        let cwd = std::env::current_dir().context("reading the current directory")?;
        let mut program = vec![text(&prefix.join("corral"))?, "serve".to_string()];
        program.extend(serve_args.iter().cloned());
        let state_dir = match &config.state_dir {
            Some(dir) => dir.clone(),
            None => target.platform.default_state_dir(&target.home),
        };
        let mut environment = carried_environment(std::env::vars_os())?;
        if let Scope::System(_) = target.scope {
            // sudo's HOME may be root's: the service's is its user's, and its state directory
            // is spelled out, so that the plan's writable paths are the ones it uses.
            environment.insert("HOME".into(), text(&target.home)?);
            environment.insert("CORRAL_STATE_DIR".into(), text(&state_dir)?);
        }
        let log_dir = config.log.dir.as_deref().map(text).transpose()?;
        let writable = [
            config.prefix_cache.dir.as_deref(),
            config.log.dir.as_deref(),
        ]
        .into_iter()
        .flatten()
        .map(text)
        .collect::<Result<_>>()?;
        Ok(Self {
            program,
            environment,
            working_directory: text(&cwd)?,
            exit_timeout: exit_timeout(config),
            built,
            prefix: prefix.to_path_buf(),
            state_dir: text(&state_dir)?,
            writable,
            log_dir,
        })
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
pub(super) fn text(path: &Path) -> Result<String> {
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
}
