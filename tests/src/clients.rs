//! The agent CLIs that must work against corral unmodified: Claude Code, Codex and opencode, as
//! `cargo xtask setup` installs them (pinned in `tests/clients/package.json`) into
//! `build/clients/`. Each run is headless, with the CLI's default tool set, in a temporary home
//! and working directory (its whole configuration comes from here, and nothing it writes
//! outlives the run), telemetry and update checks off, and any proxied traffic sent to a closed
//! port on 127.0.0.1 so that only loopback is reached.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::PATIENCE;

/// The model name the CLIs are configured with where they take one; corral's test servers serve
/// a model of that id, and alias the CLIs' own defaults (`claude-*`, `gpt-*`) to it.
pub const MODEL: &str = "local-model";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    ClaudeCode,
    Codex,
    Opencode,
}

/// The wire API a CLI speaks to its provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Chat,
    Messages,
    Responses,
}

impl Cli {
    pub fn name(self) -> &'static str {
        match self {
            Cli::ClaudeCode => "claude-code",
            Cli::Codex => "codex",
            Cli::Opencode => "opencode",
        }
    }

    /// The npm package it comes in.
    fn package(self) -> &'static str {
        match self {
            Cli::ClaudeCode => "@anthropic-ai/claude-code",
            Cli::Codex => "@openai/codex",
            Cli::Opencode => "opencode-ai",
        }
    }

    fn binary(self) -> &'static str {
        match self {
            Cli::ClaudeCode => "claude",
            Cli::Codex => "codex",
            Cli::Opencode => "opencode",
        }
    }

    /// A harmless tool of the CLI's default set for tool round trips, with arguments it accepts.
    /// Each touches only the session's own state: opencode's file tools (glob, grep) need a
    /// ripgrep that opencode downloads on first use, which a machine off the network lacks.
    pub fn harmless_tool(self) -> (&'static str, Value) {
        match self {
            Cli::ClaudeCode => ("TaskList", json!({})),
            Cli::Codex => ("get_goal", json!({})),
            Cli::Opencode => ("todowrite", json!({"todos": []})),
        }
    }
}

impl Api {
    pub fn name(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Messages => "messages",
            Api::Responses => "responses",
        }
    }
}

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is inside the workspace")
}

/// The version of `cli` that `tests/clients/package.json` pins.
pub fn version(cli: Cli) -> String {
    let path = workspace_root().join("tests/clients/package.json");
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    manifest["dependencies"][cli.package()]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Where `cargo xtask setup` puts the CLIs' executables, or why they are not there (the tests
/// that need them print it and skip).
pub fn installed() -> Result<PathBuf, String> {
    let bin = workspace_root().join("build/clients/node_modules/.bin");
    let missing: Vec<&str> = [Cli::ClaudeCode, Cli::Codex, Cli::Opencode]
        .iter()
        .map(|cli| cli.binary())
        .filter(|name| !bin.join(name).exists())
        .collect();
    if missing.is_empty() {
        Ok(bin)
    } else {
        Err(format!(
            "{} not installed in {} (`cargo xtask setup` installs them when npm is present)",
            missing.join(", "),
            bin.display()
        ))
    }
}

/// One headless run of a CLI.
pub struct Run<'a> {
    pub cli: Cli,
    pub api: Api,
    /// The server's `http://HOST:PORT`.
    pub base_url: &'a str,
    pub prompt: &'a str,
    /// Codex only: whether its config names a model. Without one it sends its newest default
    /// model's request shape (`additional_tools`, `text.verbosity`, `reasoning.context`).
    pub configured_model: bool,
    /// An image the prompt comes with, copied into the working directory as [`ATTACHMENT`] and
    /// given the CLI's own way: Claude Code's `@` mention, Codex's `--image`, opencode's `--file`.
    pub attachment: Option<&'a Path>,
}

/// The name an attached image has in the run's working directory.
pub const ATTACHMENT: &str = "shot.png";

/// What a finished run printed.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// The stdout's JSON lines (the CLIs' event streams), skipping anything else.
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Both streams, for assertion messages.
    pub fn transcript(&self) -> String {
        format!(
            "status {}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// The temporary home and working directory of a run; the recordings name them by these fixed
/// paths instead, so that they do not change from one recording to the next.
pub struct Sandbox {
    pub home: tempfile::TempDir,
    pub work: tempfile::TempDir,
}

pub const RECORDED_HOME: &str = "/tmp/corral-clients/home";
pub const RECORDED_WORK: &str = "/tmp/corral-clients/work";

impl Sandbox {
    fn new() -> Self {
        Self {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        }
    }

    /// `text` with the sandbox's paths replaced by the fixed ones, also where a CLI wrote them
    /// as one name with `-` for `/` and `.` (Claude Code's project directories).
    pub fn scrub(&self, text: &str) -> String {
        let flat = |path: &str| path.replace(['/', '.'], "-");
        let mut text = text.to_owned();
        for (path, recorded) in [
            (self.work.path(), RECORDED_WORK),
            (self.home.path(), RECORDED_HOME),
        ] {
            let path = path.to_string_lossy();
            text = text
                .replace(&*path, recorded)
                .replace(&flat(&path), &flat(recorded));
        }
        text
    }
}

impl Run<'_> {
    /// Runs the CLI to its end (killed, with its process group, after the hang guard) and
    /// returns its output with the sandbox it ran in.
    pub fn finish(&self, bin: &Path) -> (Finished, Sandbox) {
        let sandbox = Sandbox::new();
        if let Some(image) = self.attachment {
            std::fs::copy(image, sandbox.work.path().join(ATTACHMENT)).unwrap();
        }
        let mut command = Command::new(bin.join(self.cli.binary()));
        self.configure(&mut command, &sandbox);
        let finished = run_guarded(command);
        (finished, sandbox)
    }

    fn configure(&self, command: &mut Command, sandbox: &Sandbox) {
        let home = sandbox.home.path();
        command
            .current_dir(sandbox.work.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("TMPDIR", std::env::temp_dir())
            // Whatever would leave the machine goes through a proxy that is not there.
            .env("HTTPS_PROXY", "http://127.0.0.1:9")
            .env("HTTP_PROXY", "http://127.0.0.1:9")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("NO_COLOR", "1");
        match self.cli {
            Cli::ClaudeCode => self.claude_code(command),
            Cli::Codex => self.codex(command, home),
            Cli::Opencode => self.opencode(command, home),
        }
    }

    fn claude_code(&self, command: &mut Command) {
        assert_eq!(self.api, Api::Messages, "Claude Code speaks Messages only");
        let prompt = match self.attachment {
            Some(_) => format!("@{ATTACHMENT} {}", self.prompt),
            None => self.prompt.to_owned(),
        };
        command
            .env("ANTHROPIC_BASE_URL", self.base_url)
            .env("ANTHROPIC_API_KEY", "corral-test")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .args(["-p", &prompt, "--output-format", "stream-json", "--verbose"]);
    }

    fn codex(&self, command: &mut Command, home: &Path) {
        assert_eq!(self.api, Api::Responses, "Codex speaks Responses only");
        let codex_home = home.join(".codex");
        std::fs::create_dir_all(&codex_home).unwrap();
        let model = if self.configured_model {
            format!("model = \"{MODEL}\"\n")
        } else {
            String::new()
        };
        let config = format!(
            "{model}model_provider = \"corral\"\n\
             check_for_update_on_startup = false\n\
             \n\
             [analytics]\n\
             enabled = false\n\
             \n\
             [feedback]\n\
             enabled = false\n\
             \n\
             [model_providers.corral]\n\
             name = \"corral\"\n\
             base_url = \"{}/v1\"\n\
             wire_api = \"responses\"\n\
             env_key = \"CORRAL_API_KEY\"\n",
            self.base_url
        );
        std::fs::write(codex_home.join("config.toml"), config).unwrap();
        command
            .env("CODEX_HOME", &codex_home)
            .env("CORRAL_API_KEY", "corral-test")
            .args([
                "exec",
                "--skip-git-repo-check",
                "--sandbox",
                "read-only",
                "--json",
            ])
            .arg(self.prompt)
            .stdin(Stdio::null());
        // After the prompt: the option takes several files.
        if self.attachment.is_some() {
            command.args(["--image", ATTACHMENT]);
        }
    }

    fn opencode(&self, command: &mut Command, home: &Path) {
        let package = match self.api {
            Api::Chat => "@ai-sdk/openai-compatible",
            Api::Messages => "@ai-sdk/anthropic",
            Api::Responses => "@ai-sdk/openai",
        };
        // opencode sends an attachment only to a model it is told reads images.
        let model = match self.attachment {
            Some(_) => json!({"name": MODEL, "attachment": true,
                              "modalities": {"input": ["text", "image"], "output": ["text"]}}),
            None => json!({"name": MODEL}),
        };
        let config = json!({
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": false,
            "share": "disabled",
            "model": format!("corral/{MODEL}"),
            "provider": {"corral": {
                "npm": package,
                "name": "corral",
                "options": {"baseURL": format!("{}/v1", self.base_url), "apiKey": "corral-test"},
                "models": {MODEL: model},
            }},
        });
        let dir = home.join(".config/opencode");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("opencode.json"), config.to_string()).unwrap();
        command
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
            .env("OPENCODE_DISABLE_SHARE", "1")
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
            .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
            .args(["run", "--format", "json", self.prompt]);
        // After the prompt: the option takes several files.
        if self.attachment.is_some() {
            command.args(["--file", ATTACHMENT]);
        }
    }
}

/// Runs `command` in its own process group with no stdin; after `PATIENCE` the group is killed.
/// The group is killed when the CLI has exited too, so no helper it started outlives the run;
/// the CLI is reaped only after that, so its group id cannot have been reused.
fn run_guarded(mut command: Command) -> Finished {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    let read = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let (exited_tx, exited_rx) = mpsc::channel();
    // Waits for the exit without reaping (WNOWAIT); `child.wait` below reaps.
    let watcher = thread::spawn(move || {
        let _ = waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT);
        let _ = exited_tx.send(());
    });
    let hung = exited_rx.recv_timeout(PATIENCE).is_err();
    let _ = killpg(pid, Signal::SIGKILL);
    let status = child.wait().unwrap();
    watcher.join().unwrap();
    let finished = Finished {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    assert!(
        !hung,
        "the CLI did not finish within {PATIENCE:?}:\n{}",
        finished.transcript()
    );
    finished
}
