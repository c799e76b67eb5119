//! The official Python client SDKs, run against a `corral serve`: each test script in
//! `tests/sdk/` is started with the set-up's pinned virtualenv (`build/sdk`, made by `cargo xtask
//! setup` from `tests/sdk/requirements.txt`) and checks what the SDK makes of corral's answers.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is inside the workspace")
}

/// The virtualenv's interpreter.
pub fn python() -> PathBuf {
    let path = workspace_root().join("build/sdk/bin/python");
    assert!(
        path.exists(),
        "{} is missing; run `cargo xtask setup`",
        path.display()
    );
    path
}

/// Runs `tests/sdk/<script>` with `base_url` (the server's `/v1`) and `args`; panics with the
/// script's output unless it exits 0. Returns its stdout.
pub fn run(script: &str, base_url: &str, args: &[&str]) -> String {
    let path = workspace_root().join("tests/sdk").join(script);
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(python())
        .arg(&path)
        .arg(base_url)
        .args(args)
        // The SDKs read these; a developer's own must not leak into a test.
        .env("OPENAI_API_KEY", "unused")
        .env("ANTHROPIC_API_KEY", "unused")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_BASE_URL")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("running the SDK script");
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    assert!(
        status.success(),
        "{script} {args:?} failed ({status}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&stderr)
    );
    stdout
}
