//! Project automation (`cargo xtask ...`), in Rust so that it runs wherever cargo does.
//!
//! On Linux, mlx-sys cannot build itself (it fetches MLX with git and links Apple frameworks), so
//! `setup` prepares MLX from the `mlx-cpu` wheel, builds mlx-c and its bindings, and writes a cargo
//! config that overrides mlx-sys's build script. Every other command runs cargo with that config.
//! On macOS mlx-sys builds by itself and these commands are plain cargo. On every platform `setup`
//! also fetches the real models the tests run (`test_models`: SmolLM2, `requantized_models`: SmolLM2
//! as llama.cpp's quantizer writes K-quants, `minilm`: all-MiniLM-L6-v2)
//! and installs the client SDKs the end-to-end tests speak to corral with (`sdk`) and, where npm
//! exists, the agent CLIs they run against it (`clients`).

mod cargo_config;
mod clients;
mod minilm;
mod mlx_c;
mod paths;
mod requantized_models;
mod sdk;
mod sha256;
mod system_packages;
mod test_models;
mod wheel;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: cargo xtask <command>

commands:
  setup            prepare MLX for this machine, fetch the test models and install the client
                   SDKs and (with npm) the agent CLIs the tests use (idempotent; seconds when
                   already done)
  test             setup, then check formatting and lints and run every test
  serve [ARGS]     setup, then start `corral serve` (release build) with ARGS
  cargo ARGS       setup, then run `cargo ARGS` with the MLX build configuration
  reference        regenerate the reference data in tests/data from mlx-lm, transformers,
                   sentence-transformers and llama.cpp (needs Python, pip and a C++ toolchain)";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("xtask: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    let command = args.next().and_then(|arg| arg.into_string().ok());
    let rest: Vec<OsString> = args.collect();
    match command.as_deref() {
        Some("setup") => {
            if let Some(config) = setup()? {
                println!("{}", config.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Some("test") => {
            let mut cargo = Cargo::new()?;
            // One build of everything: incremental state would only double `target/` (7 of its
            // 12 GB measured), and a full disk kills the linker mid-run.
            cargo.incremental = false;
            cargo.ok(&["fmt", "--all", "--", "--check"])?;
            cargo.ok(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])?;
            // End-to-end tests start the real binaries, which `cargo test` alone does not build.
            // Built beside the tests in one run, the binaries and the tests share one feature
            // set, so `cargo test` compiles nothing again.
            cargo.ok(&["build", "--workspace", "--all-targets"])?;
            cargo.ok(&["test", "--workspace"])?;
            Ok(ExitCode::SUCCESS)
        }
        Some("serve") => {
            let cargo = Cargo::new()?;
            // `corral serve` starts `corral-worker` from its own directory.
            cargo.ok(&["build", "--release", "--workspace", "--bins"])?;
            let mut args: Vec<OsString> = [
                "run",
                "--release",
                "--quiet",
                "--bin",
                "corral",
                "--",
                "serve",
            ]
            .into_iter()
            .map(OsString::from)
            .collect();
            // `cargo xtask serve -- --port 8000` and `cargo xtask serve --port 8000` both work.
            args.extend(rest.into_iter().skip_while(|arg| arg == "--"));
            // With no model configured, corral serves this one: a real instruct model.
            let paths = paths::Paths::discover()?;
            let default_model = test_models::ensure(&paths)?;
            // ... with its published sampling, unless the user brings a configuration.
            let own_config = std::env::var_os("CORRAL_CONFIG").is_some()
                || args
                    .iter()
                    .any(|arg| arg.to_str().is_some_and(|arg| arg.starts_with("--config")));
            if !own_config {
                args.push("--config".into());
                args.push(test_models::serve_config(&paths)?.into());
            }
            let mut command = cargo.command(&args);
            command.env("CORRAL_DEFAULT_MODEL", default_model);
            cargo.status(command)
        }
        Some("cargo") => Cargo::new()?.run(&rest),
        Some("reference") => reference(),
        _ => bail!("{USAGE}"),
    }
}

/// Prepares MLX when this platform needs it and fetches the test model; returns the cargo config
/// file to pass, if any.
fn setup() -> Result<Option<PathBuf>> {
    let paths = paths::Paths::discover()?;
    let config = if cfg!(target_os = "macos") {
        None
    } else {
        Some(prepare_mlx(&paths)?)
    };
    let gguf = test_models::ensure(&paths)?;
    requantized_models::ensure(&paths, &gguf)?;
    minilm::ensure(&paths)?;
    sdk::ensure(&paths)?;
    clients::ensure(&paths)?;
    Ok(config)
}

/// The Linux-only part of setup: MLX from the wheel, mlx-c, and the cargo config that uses them.
fn prepare_mlx(paths: &paths::Paths) -> Result<PathBuf> {
    system_packages::ensure()?;
    let mlx_sys = mlx_c::MlxSysSource::locate(paths)?;
    let wheel = wheel::ensure(paths, &mlx_sys.mlx_version)?;
    let built = mlx_c::ensure_built(paths, &mlx_sys, &wheel)?;
    cargo_config::write(paths, &wheel, &built)
}

/// cargo, run with the MLX configuration of this machine (set up once per command).
struct Cargo {
    config: Option<PathBuf>,
    incremental: bool,
}

impl Cargo {
    fn new() -> Result<Self> {
        Ok(Self {
            config: setup()?,
            incremental: true,
        })
    }

    fn run(&self, args: &[OsString]) -> Result<ExitCode> {
        self.status(self.command(args))
    }

    fn command(&self, args: &[OsString]) -> Command {
        let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        let (subcommand, rest) = args
            .split_first()
            .map_or((None, args), |(s, r)| (Some(s), r));
        command.args(subcommand);
        // After the subcommand, so that external ones (clippy) pass it on to the build they run;
        // `fmt` builds nothing and reads `--config` as rustfmt's own option.
        if let Some(config) = self
            .config
            .as_ref()
            .filter(|_| subcommand.is_some_and(|s| s != "fmt"))
        {
            command.arg("--config").arg(config);
        }
        command.args(rest);
        if !self.incremental {
            command.env("CARGO_INCREMENTAL", "0");
        }
        command
    }

    fn status(&self, mut command: Command) -> Result<ExitCode> {
        let status = command
            .status()
            .with_context(|| format!("running {command:?}"))?;
        Ok(if status.success() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }

    fn ok(&self, args: &[&str]) -> Result<()> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        if self.run(&args)? != ExitCode::SUCCESS {
            bail!("cargo {} failed", args.join(" ".as_ref()).to_string_lossy());
        }
        Ok(())
    }
}

fn reference() -> Result<ExitCode> {
    let paths = paths::Paths::discover()?;
    let mlx_sys = mlx_c::MlxSysSource::locate(&paths)?;
    let gguf = test_models::ensure(&paths)?;
    requantized_models::ensure(&paths, &gguf)?;
    requantized_models::ensure_mtmd(&paths)?;
    let minilm = minilm::ensure(&paths)?;
    let status = Command::new("bash")
        .arg(paths.root.join("scripts/reference/regenerate.sh"))
        .arg(&mlx_sys.mlx_version)
        .arg(&gguf)
        .arg(&minilm)
        .current_dir(&paths.root)
        .status()
        .context("running scripts/reference/regenerate.sh")?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
