//! Helpers for the end-to-end tests in `tests/e2e/`: the built binaries, generated fixture models,
//! the real test model and waiting on a condition; `server` is a running `corral serve`,
//! `fake_hub` a Hugging Face hub for the pull tests, `sdk` the official Python client SDKs,
//! `families` each served model family as a servable tiny checkpoint with its real template, and
//! `bench` holds what the benches in `benches/` share; `clients` runs the agent CLIs and `capture`
//! records what they send; `loopback` serves those stand-in servers.

pub mod bench;
pub mod browser;
pub mod capture;
pub mod clients;
pub mod fake_hub;
pub mod families;
pub mod loopback;
pub mod sdk;
pub mod server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};

/// How long a test waits for anything before it calls it a hang. Only a guard: a machine that is
/// also compiling runs these tests many times slower than an idle one, so nothing that takes the
/// machine's time (a worker's start, a prefill, a stream) may be bounded by less.
pub const PATIENCE: Duration = Duration::from_secs(300);

/// A binary of this workspace, next to the test executable's `deps/` directory.
/// `cargo xtask test` builds every binary before the tests run.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable is in target/<profile>/deps");
    let path = profile_dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run the tests with `cargo xtask test`",
        path.display()
    );
    path
}

/// Keeps a `corral serve` away from the developer's own model libraries: its HOME is `home`, and
/// the variables that would point it at a Hugging Face cache or an Ollama library are unset.
/// Variables a test sets after this call win.
pub fn isolate_discovery<'a>(command: &'a mut Command, home: &Path) -> &'a mut Command {
    command.env("HOME", home);
    for name in [
        "HF_HOME",
        "HF_HUB_CACHE",
        "XDG_CACHE_HOME",
        "OLLAMA_MODELS",
        "CORRAL_DEFAULT_MODEL",
    ] {
        command.env_remove(name);
    }
    command
}

/// SmolLM2-135M-Instruct as a Q4_1 GGUF, the real model the tests run; `cargo xtask setup`
/// fetches it into the workspace's `build/models/`, pinned by version and sha256.
pub fn smollm2_gguf() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is inside the workspace");
    let path = root.join("build/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.exists(),
        "{} is missing; run `cargo xtask setup`",
        path.display()
    );
    path
}

/// SmolLM2-135M-Instruct as llama.cpp's quantizer writes `recipe` (`Q4_K_M`, `Q5_K_M`, `Q6_K`):
/// `cargo xtask setup` quantizes the Q4_1 model into the workspace's `build/models/`, each output
/// pinned by sha256.
pub fn smollm2_requantized(recipe: &str) -> PathBuf {
    let path = smollm2_gguf().with_file_name(format!("SmolLM2-135M-Instruct.{recipe}.gguf"));
    assert!(
        path.exists(),
        "{} is missing; run `cargo xtask setup`",
        path.display()
    );
    path
}

/// sentence-transformers' all-MiniLM-L6-v2 in its sentence-transformers layout (`modules.json`,
/// `1_Pooling/`, safetensors, WordPiece `tokenizer.json`), the real embedding model the tests run;
/// `cargo xtask setup` fetches it into the workspace's `build/models/`, pinned by version and
/// sha256. `tests/data/minilm_reference.json` holds its reference vectors.
pub fn minilm_model() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is inside the workspace");
    let path = root.join("build/models/all-MiniLM-L6-v2");
    assert!(
        path.join("model.safetensors").exists(),
        "{} is missing; run `cargo xtask setup`",
        path.display()
    );
    path
}

/// Qwen3's chat template reduced to what tests of thinking need: ChatML, and
/// `enable_thinking=false` closing an empty think block in the prompt. `</think>` in it tells the
/// worker the model thinks.
pub const THINKING_TEMPLATE: &str = r#"{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}
{{- '<think>\n\n</think>\n\n' }}
{%- endif %}
{%- endif %}"#;

/// A tiny fixture model in a fresh temporary directory (removed when the guard drops).
pub fn tiny_model(arch: Arch) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let options = FixtureOptions {
        size: Size::Tiny,
        arch,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    corral_fixture::generate(&options, dir.path()).expect("generating the fixture");
    dir
}

/// Polls `done` until it holds; `what` names the condition when it does not within `PATIENCE`.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}
