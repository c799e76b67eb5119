//! What the benches in `tests/benches/` share: the release binaries they run, the iteration count
//! they read from the environment, `corral serve` as a child process, and the supervisor
//! library's own launcher for the paths that skip the server.
//!
//! The benches run release binaries built beforehand (plain cargo cannot link MLX on Linux), so
//! unlike `binary` in the crate root, `bench::binary` asks for a release build when one is
//! missing. `CorralServer` always stops its child, panics included: a bench that leaves a server
//! and its workers behind would skew every later run on the machine.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use corral::process::{RunDir, Spawner};
use corral_ipc::{GenerateRequest, Prompt};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::isolate_discovery;

/// The environment variable that overrides a bench's iteration count.
pub const ITERATIONS_ENV: &str = "CORRAL_BENCH_ITERATIONS";

/// `CORRAL_BENCH_ITERATIONS` when set (it must be a positive integer), else `default`.
pub fn iterations(default: usize) -> usize {
    match std::env::var(ITERATIONS_ENV) {
        Ok(value) => value.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| {
            panic!("{ITERATIONS_ENV} must be a positive integer, got {value:?}")
        }),
        Err(_) => default,
    }
}

/// A binary from `cargo xtask cargo build --release --bins`. A bench runs from
/// `target/release/deps/`, and the binaries sit one level up.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the bench executable's path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("the bench executable is in target/<profile>/deps")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing; build it first with `cargo xtask cargo build --release --bins`",
        path.display()
    );
    path
}

/// The spawner `corral serve` would build, for benches that play supervisor themselves: workers
/// of the release `corral-worker`, each model in the subdirectory of `models` named after it, and
/// the run directory under `state`. Exit reports are for a pool and go nowhere; `process::stop`
/// waits on the reaper directly.
pub fn launcher(models: &Path, state: &Path) -> Spawner {
    let run_dir = RunDir::create(state).expect("creating the run directory");
    let models = models.to_path_buf();
    let (exits, _) = tokio::sync::mpsc::unbounded_channel();
    Spawner::new(
        binary("corral-worker"),
        run_dir,
        std::sync::Arc::new(move |model| Ok(models.join(model))),
        exits,
    )
}

/// A request for a worker's socket: `prompt` as text, greedy, and OpenAI's neutral defaults for
/// everything else, which is what `/v1/completions` sends for a body with only these fields.
pub fn generate_request(prompt: &str, max_tokens: u32) -> GenerateRequest {
    GenerateRequest::greedy(Prompt::Text(prompt.to_owned()), max_tokens)
}

/// `corral serve` as a child process on 127.0.0.1, with a keep-alive HTTP client. Dropping it,
/// panics included, sends SIGTERM (corral drains and stops its workers), waits up to the
/// patience, then SIGKILLs and reaps it.
pub struct CorralServer {
    child: Child,
    base: String,
    http: reqwest::blocking::Client,
    patience: Duration,
}

impl CorralServer {
    /// `corral serve --port 0 --drain-timeout 5` over `models` and `state`, with `extra_args`
    /// after them. `patience` bounds the startup, each HTTP request and the stop.
    pub fn start(models: &Path, state: &Path, extra_args: &[&str], patience: Duration) -> Self {
        let mut child = isolate_discovery(&mut Command::new(binary("corral")), &state.join("home"))
            .args(["serve", "--port", "0", "--drain-timeout", "5"])
            .arg("--models-dir")
            .arg(models)
            .arg("--state-dir")
            .arg(state)
            .args(extra_args)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning corral serve");
        let stderr = child.stderr.take().expect("corral's piped stderr");
        let address = listening_address(stderr, patience);
        let http = reqwest::blocking::Client::builder()
            .timeout(patience)
            // A proxy from the environment must not see (or slow down) loopback traffic.
            .no_proxy()
            .build()
            .expect("building the HTTP client");
        Self {
            child,
            base: format!("http://{address}"),
            http,
            patience,
        }
    }

    /// The full URL of `path` ("/v1/completions").
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The keep-alive client, for requests the helpers below do not cover.
    pub fn http(&self) -> &reqwest::blocking::Client {
        &self.http
    }

    /// `GET path`, answered with JSON.
    pub fn get_json(&self, path: &str) -> Value {
        self.http
            .get(self.url(path))
            .send()
            .unwrap_or_else(|error| panic!("GET {path}: {error}"))
            .json()
            .unwrap_or_else(|error| panic!("GET {path} did not answer JSON: {error}"))
    }

    /// `POST path` with a JSON body; panics, with corral's answer, unless it succeeds.
    pub fn post(&self, path: &str, body: &Value) -> reqwest::blocking::Response {
        let response = self
            .http
            .post(self.url(path))
            .json(body)
            .send()
            .unwrap_or_else(|error| panic!("POST {path}: {error}"));
        let status = response.status();
        assert!(
            status.is_success(),
            "POST {path}: corral answered {status}: {}",
            response.text().unwrap_or_default()
        );
        response
    }
}

impl Drop for CorralServer {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        // SIGTERM lets corral drain and stop its workers; SIGKILL only if that hangs.
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + self.patience;
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads corral's log until it names its address. The rest of the log is drained and dropped on
/// a thread (a full pipe would block corral); the lines before it go into the panic message if
/// the address does not come within `patience`.
fn listening_address(stderr: ChildStderr, patience: Duration) -> String {
    let (lines_tx, lines) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let deadline = Instant::now() + patience;
    let mut log = Vec::new();
    while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if let Some(rest) = line.split("listening on http://").nth(1) {
            let address = rest.split_whitespace().next().unwrap_or_default();
            return address.to_owned();
        }
        log.push(line);
    }
    panic!(
        "corral did not start listening; its log:\n{}",
        log.join("\n")
    );
}
