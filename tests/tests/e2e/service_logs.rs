//! corral's log files as a service writes them: a real `corral serve` logging to a directory
//! rotates its log at the configured size, keeps at most the configured number of files and loses
//! no line at a rotation; and a real `corral service logs -f` follows a log that is being
//! written and rotated, showing every line once, in order.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;

use corral::config::LogConfig;
use corral::log_files;
use corral_fixture::Arch;
use corral_tests::server::{Dirs, client};
use corral_tests::{PATIENCE, binary, isolate_discovery, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A child process that is killed and reaped however the test ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn log_text(dir: &Path) -> Vec<(String, String)> {
    if !dir.exists() {
        return Vec::new();
    }
    log_files::files(dir)
        .unwrap()
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap_or_default())
        })
        .collect()
}

/// The request numbers in the `?n=` of the logged request lines, per file.
fn request_numbers(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|line| line.split("uri=/v1/models?n=").nth(1))
        .map(|rest| rest[..5].parse().expect("a whole request line"))
        .collect()
}

#[test]
fn a_serving_corral_rotates_its_log_keeping_at_most_keep_files_and_every_recent_line() {
    const REQUESTS: u32 = 300;
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let logs = dirs.state.path().join("logs");
    let config = dirs.write_config("[log]\nmax_bytes = 4096\nkeep = 3\n");
    let mut command = Command::new(binary("corral"));
    isolate_discovery(&mut command, &dirs.home())
        .args(["serve", "--port", "0", "--models-dir"])
        .arg(dirs.models.path())
        .arg("--state-dir")
        .arg(dirs.state.path())
        .arg("--config")
        .arg(&config)
        .arg("--log-dir")
        .arg(&logs)
        // A line per request: enough lines for many rotations.
        .env("RUST_LOG", "info,corral::metrics=debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut server = Reaped(command.spawn().unwrap());
    let stderr = server.0.stderr.take().unwrap();
    let stderr = thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());

    // The address is in the log file, not on stderr.
    let mut address = String::new();
    wait_until("corral to log its address", || {
        let text: String = log_text(&logs).into_iter().map(|(_, text)| text).collect();
        if let Some(rest) = text.split("listening on http://").nth(1) {
            address = rest.split_whitespace().next().unwrap().to_owned();
        }
        !address.is_empty()
    });
    let http = client();
    for n in 0..REQUESTS {
        let url = format!("http://{address}/v1/models?n={n:05}");
        assert!(http.get(url).send().unwrap().status().is_success());
    }

    // Each line is logged before its answer is sent: all are on disk now.
    let files = log_text(&logs);
    let names: Vec<_> = files.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["corral.log.2", "corral.log.1", "corral.log"],
        "rotated, 3 kept"
    );
    for (name, text) in &files {
        assert!(text.len() <= 4096, "{name} holds {} bytes", text.len());
    }
    // Nothing lost at a rotation: the kept files hold an unbroken run of requests up to the
    // last, each once, across both rotation boundaries.
    let per_file: Vec<Vec<u32>> = files
        .iter()
        .map(|(_, text)| request_numbers(text))
        .collect();
    let all: Vec<u32> = per_file.concat();
    let first = all[0];
    assert_eq!(all, (first..REQUESTS).collect::<Vec<_>>(), "{per_file:?}");
    assert!(
        per_file.iter().all(|numbers| !numbers.is_empty()),
        "{per_file:?}"
    );
    assert!(first > 0, "the oldest requests went with the oldest file");
    assert_eq!(all.iter().collect::<BTreeSet<_>>().len(), all.len());

    kill(Pid::from_raw(server.0.id() as i32), Signal::SIGTERM).unwrap();
    wait_until("corral to drain and exit", || {
        server.0.try_wait().unwrap().is_some()
    });
    let stderr = stderr.join().unwrap();
    assert!(
        !stderr.contains("listening on"),
        "logs went to stderr: {stderr}"
    );
    let (_, last) = log_text(&logs).pop().unwrap();
    assert!(last.contains("stopped"), "{last}");
}

fn line(n: u32) -> String {
    format!("line {n:05} {}", "x".repeat(60))
}

#[test]
fn service_logs_follow_shows_every_line_once_through_rotations() {
    let logs = tempfile::tempdir().unwrap();
    let config = LogConfig {
        dir: None,
        max_bytes: 4096,
        keep: 3,
    };
    let writer = log_files::open(logs.path(), &config).unwrap();
    let write = |numbers: std::ops::Range<u32>| {
        for n in numbers {
            writeln!(writer.lock().unwrap(), "{}", line(n)).unwrap();
        }
    };
    write(0..10);

    let mut command = Command::new(binary("corral"));
    command
        .args(["service", "logs", "-f", "-n", "4", "--log-dir"])
        .arg(logs.path())
        .stdout(Stdio::piped());
    let mut follower = Reaped(command.spawn().unwrap());
    let stdout = follower.0.stdout.take().unwrap();
    let (lines, received) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let mut read_through = |last: u32| {
        while seen.last() != Some(&line(last)) {
            seen.push(
                received
                    .recv_timeout(PATIENCE)
                    .expect("the follower shows the line"),
            );
        }
    };
    read_through(9);

    // About 70 bytes a line, 58 lines a file: batches of 20 lines cross a rotation every third
    // batch, and the next batch waits until the follower has shown this one, so it never falls
    // more than one rotation behind (as with `tail -F`, a file pruned before it was reopened
    // would be skipped).
    for start in (10..410).step_by(20) {
        write(start..start + 20);
        read_through(start + 19);
    }
    let expected: Vec<String> = (6..410).map(line).collect();
    if let Some(at) = (0..expected.len()).find(|&i| seen.get(i) != expected.get(i)) {
        panic!(
            "line {at} differs: {:?} instead of {:?}",
            seen.get(at),
            expected.get(at)
        );
    }
    assert_eq!(seen.len(), expected.len());
    assert!(
        log_files::files(logs.path()).unwrap().len() == 3,
        "the log rotated"
    );

    let tail = Command::new(binary("corral"))
        .args(["service", "logs", "-n", "3", "--log-dir"])
        .arg(logs.path())
        .output()
        .unwrap();
    assert!(tail.status.success());
    let shown: Vec<String> = (407..410).map(line).collect();
    assert_eq!(
        String::from_utf8(tail.stdout).unwrap(),
        shown.join("\n") + "\n"
    );
}
