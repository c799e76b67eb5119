//! Logs that go to a file or a pipe (launchd and systemd log files, `> file`) carry no ANSI
//! colour codes, in either log format. Runs the real `corral serve` with its stderr on a pipe until
//! it listens, then kills it; no model is loaded, so it takes a moment.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

const ESC: u8 = 0x1b;

#[test]
fn text_logs_on_a_pipe_have_no_colour_codes() {
    let log = serve_until_listening(&[]);
    assert!(log.contains("listening on http://127.0.0.1:"), "{log}");
    assert!(!log.as_bytes().contains(&ESC), "colour codes in {log:?}");
}

#[test]
fn json_logs_on_a_pipe_are_one_plain_object_per_line() {
    let log = serve_until_listening(&["--log-format", "json"]);
    assert!(!log.as_bytes().contains(&ESC), "colour codes in {log:?}");
    for line in log.lines() {
        let entry: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}"));
        assert!(entry["fields"]["message"].is_string(), "{line}");
    }
    assert!(log.contains("listening on http://127.0.0.1:"), "{log}");
}

/// Everything `corral serve` writes to stderr from its start until it listens.
fn serve_until_listening(extra_args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let (model, models) = (dir.path().join("model"), dir.path().join("models"));
    for empty in [&model, &models] {
        std::fs::create_dir(empty).expect("creating a directory");
    }
    let corral = env!("CARGO_BIN_EXE_corral");
    let mut command = Command::new(corral);
    command
        .args(["serve", "--host", "127.0.0.1", "--port", "0", "--state-dir"])
        .arg(dir.path().join("state"))
        .arg("--models-dir")
        .arg(&models)
        // One model, so serve does not generate the default one; no request comes, so neither
        // this empty directory nor the worker binary below is ever used (serve checks it exists).
        .arg("--model")
        .arg(&model)
        .arg("--worker-binary")
        .arg(corral)
        .args(extra_args)
        .env("RUST_LOG", "info")
        // No model libraries of the developer's: an empty home, and nothing pointing elsewhere.
        .env("HOME", dir.path().join("home"))
        .env_remove("HF_HOME")
        .env_remove("HF_HUB_CACHE")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("OLLAMA_MODELS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // The caller's settings must not change what serve does or whether it may colour.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CORRAL_") || name == "NO_COLOR" {
            command.env_remove(name);
        }
    }
    let mut child = command.spawn().expect("spawning corral serve");
    let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
    let mut log = Vec::new();
    loop {
        let mut line = Vec::new();
        let read = stderr.read_until(b'\n', &mut line).expect("reading stderr");
        log.extend_from_slice(&line);
        if read == 0 {
            panic!(
                "corral serve ended before listening: {}",
                String::from_utf8_lossy(&log)
            );
        }
        if String::from_utf8_lossy(&line).contains("listening on") {
            break;
        }
    }
    // SIGKILL, not SIGTERM: serve installs its SIGTERM handler only once it serves, so a SIGTERM
    // right after the line could end it by the default action anyway, and the lines are written.
    child.kill().expect("killing corral serve");
    child.wait().expect("waiting for corral serve");
    stderr.read_to_end(&mut log).expect("reading stderr");
    String::from_utf8(log).expect("stderr is UTF-8")
}
