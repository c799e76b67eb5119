//! `corral serve`'s configuration: one typed struct with defaults that need no file.
//!
//! Precedence, highest first: command-line flags, `CORRAL_*` environment variables (clap reads
//! both), the TOML file (`--config` / `CORRAL_CONFIG`), then the defaults below.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Deserialize;

pub const DEFAULT_PORT: u16 = 8080;

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Loopback unless the operator says otherwise.
    pub host: IpAddr,
    pub port: u16,
    pub models_dirs: Vec<PathBuf>,
    pub aliases: BTreeMap<String, String>,
    /// How long in-flight requests may run on after SIGTERM/SIGINT.
    pub drain_timeout: Duration,
    /// How long a worker may take from spawn to `Ready` (loading included).
    pub worker_start_timeout: Duration,
    /// How long a stopping worker gets after `Shutdown`, and again after SIGTERM.
    pub worker_stop_grace: Duration,
    pub state_dir: Option<PathBuf>,
    /// The `corral-worker` to spawn; by default the one installed next to `corral`.
    pub worker_binary: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            host: IpAddr::from([127, 0, 0, 1]),
            port: DEFAULT_PORT,
            models_dirs: Vec::new(),
            aliases: BTreeMap::new(),
            drain_timeout: Duration::from_secs(30),
            worker_start_timeout: Duration::from_secs(120),
            worker_stop_grace: Duration::from_secs(5),
            state_dir: None,
            worker_binary: None,
        }
    }
}

/// The TOML file: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    host: Option<IpAddr>,
    port: Option<u16>,
    #[serde(default)]
    models_dirs: Vec<PathBuf>,
    #[serde(default)]
    aliases: BTreeMap<String, String>,
    drain_timeout_secs: Option<u64>,
    worker_start_timeout_secs: Option<u64>,
    worker_stop_grace_secs: Option<u64>,
    state_dir: Option<PathBuf>,
    worker_binary: Option<PathBuf>,
}

/// Values given on the command line or in the environment.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub host: Option<IpAddr>,
    pub port: Option<u16>,
    pub models_dirs: Vec<PathBuf>,
    pub drain_timeout_secs: Option<u64>,
    pub state_dir: Option<PathBuf>,
    pub worker_binary: Option<PathBuf>,
}

impl Config {
    pub fn load(file: Option<&Path>, overrides: Overrides) -> Result<Self> {
        let from_file = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading config {}", path.display()))?;
                toml::from_str::<FileConfig>(&text)
                    .with_context(|| format!("parsing config {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let defaults = Self::default();
        let secs =
            |value: Option<u64>, default: Duration| value.map_or(default, Duration::from_secs);
        let models_dirs = if overrides.models_dirs.is_empty() {
            from_file.models_dirs
        } else {
            overrides.models_dirs
        };
        Ok(Self {
            host: overrides.host.or(from_file.host).unwrap_or(defaults.host),
            port: overrides.port.or(from_file.port).unwrap_or(defaults.port),
            models_dirs,
            aliases: from_file.aliases,
            drain_timeout: secs(
                overrides
                    .drain_timeout_secs
                    .or(from_file.drain_timeout_secs),
                defaults.drain_timeout,
            ),
            worker_start_timeout: secs(
                from_file.worker_start_timeout_secs,
                defaults.worker_start_timeout,
            ),
            worker_stop_grace: secs(from_file.worker_stop_grace_secs, defaults.worker_stop_grace),
            state_dir: overrides.state_dir.or(from_file.state_dir),
            worker_binary: overrides.worker_binary.or(from_file.worker_binary),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_file_and_no_flags_give_loopback_defaults() {
        let config = Config::load(None, Overrides::default()).unwrap();
        assert_eq!(config, Config::default());
        assert!(config.host.is_loopback());
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("corral.toml");
        std::fs::write(
            &file,
            "port = 9000\nmodels_dirs = [\"/models\"]\ndrain_timeout_secs = 3\n[aliases]\nfast = \"tiny\"\n",
        )
        .unwrap();
        let config = Config::load(
            Some(&file),
            Overrides {
                port: Some(9100),
                ..Overrides::default()
            },
        )
        .unwrap();
        assert_eq!(config.port, 9100);
        assert_eq!(config.models_dirs, [PathBuf::from("/models")]);
        assert_eq!(config.drain_timeout, Duration::from_secs(3));
        assert_eq!(config.aliases["fast"], "tiny");
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("corral.toml");
        std::fs::write(&file, "prot = 1\n").unwrap();
        let error = Config::load(Some(&file), Overrides::default()).unwrap_err();
        assert!(format!("{error:#}").contains("corral.toml"), "{error:#}");
    }
}
