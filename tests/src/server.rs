//! A running `corral serve` for end-to-end tests: generated models, a state directory, the
//! real binary listening on 127.0.0.1, and the helpers the tests share to talk to it.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size, Task};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::{PATIENCE, binary, isolate_discovery};

pub struct Server {
    pub child: Child,
    base: String,
    pub state_dir: PathBuf,
    log: Arc<Mutex<Vec<String>>>,
}

/// Generated tiny models and a state directory, kept for as long as the test needs them.
pub struct Dirs {
    pub models: tempfile::TempDir,
    pub state: tempfile::TempDir,
}

impl Dirs {
    /// The server's HOME: empty unless a test puts a fake Ollama library (`.ollama/models`), LM
    /// Studio folder (`.lmstudio/models`) or Hugging Face cache (`.cache/huggingface/hub`) there.
    pub fn home(&self) -> PathBuf {
        self.state.path().join("home")
    }

    /// A copy of the model `of` named `name`.
    pub fn add_copy(&self, of: &str, name: &str) -> PathBuf {
        let copy = self.models.path().join(name);
        std::fs::create_dir_all(&copy).unwrap();
        for file in std::fs::read_dir(self.models.path().join(of)).unwrap() {
            let file = file.unwrap();
            std::fs::copy(file.path(), copy.join(file.file_name())).unwrap();
        }
        copy
    }

    /// A copy of the model `of` named `name` that the worker's description accepts (a valid
    /// config, weights, a tokenizer) but that can never load: its weights lack `tensor`, which
    /// only loading finds. The tensor is renamed in the safetensors header (its first letter
    /// made `_`), so the file keeps its layout.
    pub fn add_copy_without_tensor(&self, of: &str, name: &str, tensor: &str) -> PathBuf {
        let copy = self.add_copy(of, name);
        let weights = copy.join("model.safetensors");
        let mut bytes = std::fs::read(&weights).unwrap();
        let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let quoted = format!("\"{tensor}\"");
        let at = bytes[8..8 + header_len]
            .windows(quoted.len())
            .position(|window| window == quoted.as_bytes())
            .unwrap_or_else(|| panic!("no tensor {tensor} in {}", weights.display()));
        bytes[8 + at + 1] = b'_';
        std::fs::write(&weights, bytes).unwrap();
        copy
    }

    /// A worker executable that is killed by SIGKILL, as the OOM killer would, while it loads
    /// the model named `model`, and is the real worker for everything else (`describe`
    /// included): a start that fails for a reason that may pass.
    pub fn worker_killed_loading(&self, model: &str) -> PathBuf {
        let script = self.state.path().join("killed-worker.sh");
        let worker = binary("corral-worker");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n\
                 case \"$*\" in 'serve --model {}/{model} '*) kill -9 $$ ;; esac\n\
                 exec '{}' \"$@\"\n",
                self.models.path().display(),
                worker.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        script
    }

    /// Gives the generated model `model` this chat template (`chat_template.jinja`, which wins
    /// over the one in `tokenizer_config.json`).
    pub fn set_chat_template(&self, model: &str, template: &str) {
        let path = self.models.path().join(model).join("chat_template.jinja");
        std::fs::write(path, template).unwrap();
    }

    /// Writes `text` as a `corral.toml` in the state directory and returns its path, for
    /// `--config`.
    pub fn write_config(&self, text: &str) -> PathBuf {
        let path = self.state.path().join("corral.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Adds a generated f32 model of `size` and `arch` for `task` (an embedding or rerank
    /// fixture: a BERT encoder, a cross-encoder, a decoder embedder) under `name`.
    pub fn add_task_fixture(&self, name: &str, size: Size, arch: Arch, task: Task) {
        let options = FixtureOptions {
            size,
            arch,
            dtype: Dtype::F32,
            quantize: None,
            format: Format::Safetensors,
        };
        corral_fixture::generate_for_task(&options, task, &self.models.path().join(name)).unwrap();
    }

    /// Tiny models named after `archs` ("llama", "qwen3", ...).
    pub fn with_models(archs: &[Arch]) -> Self {
        Self::with_sized_models(Size::Tiny, archs)
    }

    /// Models of one size named after `archs`.
    pub fn with_sized_models(size: Size, archs: &[Arch]) -> Self {
        Self::generated(archs.iter().map(|&arch| FixtureOptions {
            size,
            arch,
            dtype: Dtype::F32,
            quantize: None,
            format: Format::Safetensors,
        }))
    }

    /// One model per fixture, named after its architecture.
    pub fn generated(fixtures: impl IntoIterator<Item = FixtureOptions>) -> Self {
        let models = tempfile::tempdir().unwrap();
        for options in fixtures {
            let name = format!("{:?}", options.arch).to_lowercase();
            corral_fixture::generate(&options, &models.path().join(name)).unwrap();
        }
        Self {
            models,
            state: tempfile::tempdir().unwrap(),
        }
    }

    /// One generated llama model under each of `names`, its files hard-linked so that the disk
    /// holds the weights once: `small` weights are 367 MB, and CI machines can be short of disk.
    pub fn with_shared_weights(size: Size, names: &[&str]) -> Self {
        let models = tempfile::tempdir().unwrap();
        let options = FixtureOptions {
            size,
            arch: Arch::Llama,
            dtype: Dtype::F32,
            quantize: None,
            format: Format::Safetensors,
        };
        let (first, others) = names.split_first().expect("at least one model name");
        let generated = models.path().join(first);
        corral_fixture::generate(&options, &generated).unwrap();
        for name in others {
            let linked = models.path().join(name);
            std::fs::create_dir(&linked).unwrap();
            for entry in std::fs::read_dir(&generated).unwrap() {
                let entry = entry.unwrap();
                std::fs::hard_link(entry.path(), linked.join(entry.file_name())).unwrap();
            }
        }
        Self {
            models,
            state: tempfile::tempdir().unwrap(),
        }
    }
}

impl Server {
    pub fn start(dirs: &Dirs) -> Self {
        Self::start_with(dirs, &[])
    }

    /// With more `corral serve` arguments (`--config FILE`, ...).
    pub fn start_with(dirs: &Dirs, extra_args: &[&std::ffi::OsStr]) -> Self {
        Self::start_with_env(dirs, extra_args, &[])
    }

    /// With more arguments and environment variables (`HF_HOME`, `HF_ENDPOINT`, ...).
    pub fn start_with_env(
        dirs: &Dirs,
        extra_args: &[&std::ffi::OsStr],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Self {
        let (models, state) = (&dirs.models, &dirs.state);
        let mut child = isolate_discovery(&mut Command::new(binary("corral")), &dirs.home())
            .args(["serve", "--port", "0", "--models-dir"])
            .arg(models.path())
            // An unload waits this long for the requests in flight, whose pace is the machine's.
            .arg("--drain-timeout")
            .arg(PATIENCE.as_secs().to_string())
            .arg("--state-dir")
            .arg(state.path())
            .args(extra_args)
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (address_tx, address_rx) = mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let log_writer = log.clone();
        let stderr = child.stderr.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    // Text logs end the address with a space, JSON logs with a quote.
                    let address: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || ".:[]".contains(*c))
                        .collect();
                    let _ = address_tx.send(address);
                }
                eprintln!("{line}");
                log_writer.lock().unwrap().push(line);
            }
        });
        let address = address_rx.recv_timeout(PATIENCE).expect("corral listens");
        Self {
            child,
            base: format!("http://{address}"),
            state_dir: state.path().to_path_buf(),
            log,
        }
    }

    /// Every line the server has logged so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn get_json(&self, path: &str) -> Value {
        client()
            .get(self.url(path))
            .send()
            .expect("request sent")
            .json()
            .expect("a JSON body")
    }

    /// `GET /metrics`, the Prometheus text.
    pub fn metrics(&self) -> String {
        client()
            .get(self.url("/metrics"))
            .send()
            .expect("request sent")
            .text()
            .expect("a text body")
    }

    /// `model`'s row of `GET /admin/workers`: its state, pid, restarts and the worker's stats.
    pub fn worker_row(&self, model: &str) -> Value {
        let workers = self.get_json("/admin/workers");
        workers["data"]
            .as_array()
            .expect("a list of workers")
            .iter()
            .find(|row| row["model"] == model)
            .cloned()
            .unwrap_or_else(|| panic!("no row for {model} in {workers}"))
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn post(&self, path: &str, body: &Value) -> reqwest::blocking::Response {
        client()
            .post(self.url(path))
            .json(body)
            .send()
            .expect("request sent")
    }

    /// A chat completion's answer and usage; while the model answers 503 (its worker in the
    /// crash backoff after a test killed it), asked again, up to `PATIENCE`.
    pub fn chat_past_backoff(&self, request: &Value) -> (String, Value) {
        let deadline = Instant::now() + PATIENCE;
        let response = loop {
            let response = self.post("/v1/chat/completions", request);
            if response.status() != 503 || Instant::now() > deadline {
                break response;
            }
            thread::sleep(Duration::from_millis(200));
        };
        let body: Value = response.json().unwrap();
        let text = body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("{body}"))
            .to_owned();
        (text, body["usage"].clone())
    }

    /// The first worker's prefix-cache counters.
    pub fn prefix_cache_stats(&self) -> Value {
        self.get_json("/admin/workers")["data"][0]["stats"]["prefix_cache"].clone()
    }

    pub fn worker_pids(&self) -> Vec<u32> {
        children_of(self.child.id())
    }

    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    pub fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "corral did not exit");
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn client() -> reqwest::blocking::Client {
    client_outlasting(Duration::ZERO)
}

/// A client for requests that the server may hold for up to `server_wait` on purpose (an
/// admission wait, a start timeout): its own timeout is `PATIENCE` longer, so the answer is
/// always the server's, never a client timeout racing the server's clock.
pub fn client_outlasting(server_wait: Duration) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(server_wait + PATIENCE)
        .build()
        .unwrap()
}

/// Child processes of `pid`, from /proc (procps's `pgrep` is not on every Linux machine).
#[cfg(target_os = "linux")]
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut children: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let child: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // The fields after the command name, which is in parentheses: state, then ppid.
            let after_name = &stat[stat.rfind(')')? + 1..];
            let parent: u32 = after_name.split_whitespace().nth(1)?.parse().ok()?;
            (parent == pid).then_some(child)
        })
        .collect();
    children.sort_unstable();
    children
}

#[cfg(not(target_os = "linux"))]
pub fn children_of(pid: u32) -> Vec<u32> {
    let output = Command::new("pgrep")
        .args(["-P", &pid.to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// Whether `pid` still runs. A zombie has exited and holds nothing: whether it is reaped at once
/// depends on the machine's init (some container inits reap late), so it counts as gone.
pub fn alive(pid: u32) -> bool {
    if kill(Pid::from_raw(pid as i32), None).is_err() {
        return false;
    }
    #[cfg(target_os = "linux")]
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        && let Some(after_name) = stat.rfind(')').map(|end| &stat[end + 1..])
    {
        return !matches!(after_name.split_whitespace().next(), Some("Z" | "X"));
    }
    true
}

pub fn chat(model: &str, max_tokens: u32, stream: bool) -> Value {
    json!({
        "model": model,
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
        "stream_options": {"include_usage": true},
    })
}

/// Reads SSE `data:` payloads as they arrive; `[DONE]` ends the stream.
pub fn sse_events(response: reqwest::blocking::Response) -> impl Iterator<Item = String> {
    BufReader::new(response)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| line.strip_prefix("data: ").map(str::to_owned))
}
