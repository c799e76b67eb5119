//! `corral service install --dry-run`, run as a process with a temporary HOME: it prints the
//! launchd property list or the systemd unit it would write and the exact commands it would run,
//! and changes nothing. (Only dry runs here: a real install would call launchctl or systemctl.)

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use corral_tests::binary;

/// `corral service ARGS` with nothing of the test's environment but PATH, plus `env`.
fn service(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(binary("corral"));
    command
        .arg("service")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .envs(env.iter().copied());
    command.output().expect("running corral service")
}

fn stdout(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{}; stderr: {stderr}",
        output.status
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

/// The contents of the first here-document the dry run prints for `path`.
fn written(dry_run: &str, path: &Path) -> String {
    let opening = format!("cat > {} <<'EOF'\n", path.display());
    let start = dry_run.find(&opening).expect("the file is written") + opening.len();
    let length = dry_run[start..]
        .find("\nEOF\n")
        .expect("the here-document ends");
    dry_run[start..start + length + 1].to_string()
}

fn corral_exe() -> String {
    let exe = binary("corral").canonicalize().unwrap();
    exe.to_str().unwrap().to_string()
}

fn uid(home: &Path) -> u32 {
    std::fs::metadata(home).unwrap().uid()
}

fn assert_untouched(home: &Path) {
    let entries: Vec<PathBuf> = std::fs::read_dir(home)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(entries.is_empty(), "the dry run wrote {entries:?}");
}

#[test]
fn launchd_dry_run_prints_a_valid_plist_and_the_launchctl_commands() {
    let home = tempfile::tempdir().unwrap();
    let output = service(
        home.path(),
        &[
            "install",
            "--dry-run",
            "--platform",
            "launchd",
            "--",
            "--port",
            "8081",
        ],
        &[("CORRAL_DRAIN_TIMEOUT", "60")],
    );
    let dry_run = stdout(&output);
    let plist_path = home
        .path()
        .join("Library/LaunchAgents/com.corral.server.plist");
    let xml = written(&dry_run, &plist_path);
    let job = plist::Value::from_reader_xml(xml.as_bytes())
        .expect("a valid property list")
        .into_dictionary()
        .expect("a dictionary");

    assert_eq!(job["Label"].as_string(), Some("com.corral.server"));
    let arguments: Vec<_> = job["ProgramArguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_string().unwrap().to_string())
        .collect();
    assert_eq!(
        arguments,
        [corral_exe().as_str(), "serve", "--port", "8081"]
    );
    // The drain the service will get (60 s, from its environment) plus the workers' stops.
    assert_eq!(job["ExitTimeOut"].as_unsigned_integer(), Some(75));
    let environment = job["EnvironmentVariables"].as_dictionary().unwrap();
    assert_eq!(environment["CORRAL_DRAIN_TIMEOUT"].as_string(), Some("60"));
    assert_eq!(environment["HOME"].as_string(), home.path().to_str());
    let logs = home.path().join("Library/Logs/corral");
    assert_eq!(
        job["StandardErrorPath"].as_string(),
        logs.join("corral.err.log").to_str()
    );

    let uid = uid(home.path());
    let lines: Vec<_> = dry_run.lines().collect();
    let bootout = format!("launchctl bootout gui/{uid}/com.corral.server || true");
    let bootstrap = format!("launchctl bootstrap gui/{uid} {}", plist_path.display());
    assert!(
        lines.contains(&bootout.as_str()),
        "{bootout:?} in:\n{dry_run}"
    );
    assert!(
        lines.contains(&bootstrap.as_str()),
        "{bootstrap:?} in:\n{dry_run}"
    );
    assert!(lines.contains(&format!("mkdir -p {}", logs.display()).as_str()));
    assert_untouched(home.path());
}

#[test]
fn systemd_dry_run_prints_the_unit_and_the_systemctl_commands() {
    let home = tempfile::tempdir().unwrap();
    let output = service(
        home.path(),
        &[
            "install",
            "--dry-run",
            "--platform",
            "systemd",
            "--",
            "--drain-timeout",
            "100",
        ],
        &[],
    );
    let dry_run = stdout(&output);
    let unit_path = home.path().join(".config/systemd/user/corral.service");
    let unit = written(&dry_run, &unit_path);
    let exec_start = format!(
        r#"ExecStart="{}" "serve" "--drain-timeout" "100""#,
        corral_exe()
    );
    for expected in [
        exec_start.as_str(),
        "Restart=on-failure",
        "TimeoutStopSec=115",
        "WantedBy=default.target",
    ] {
        assert!(
            unit.lines().any(|line| line == expected),
            "{expected:?} in:\n{unit}"
        );
    }
    let commands: Vec<_> = dry_run
        .lines()
        .filter(|line| line.starts_with("systemctl"))
        .collect();
    assert_eq!(
        commands,
        [
            "systemctl --user daemon-reload",
            "systemctl --user enable corral.service",
            "systemctl --user restart corral.service",
        ]
    );
    assert_untouched(home.path());
}

#[test]
fn serve_options_that_serve_would_refuse_fail_the_install() {
    let home = tempfile::tempdir().unwrap();
    let output = service(
        home.path(),
        &[
            "install",
            "--dry-run",
            "--platform",
            "systemd",
            "--",
            "--no-such-option",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("serve options"), "{stderr}");
    assert!(stderr.contains("--no-such-option"), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing is planned");
}

#[test]
fn stop_and_start_dry_runs_print_one_launchctl_command_each() {
    let home = tempfile::tempdir().unwrap();
    let uid = uid(home.path());
    for (action, expected) in [
        (
            "stop",
            format!("launchctl kill SIGTERM gui/{uid}/com.corral.server\n"),
        ),
        (
            "start",
            format!("launchctl kickstart gui/{uid}/com.corral.server\n"),
        ),
        (
            "status",
            format!("launchctl print gui/{uid}/com.corral.server\n"),
        ),
    ] {
        let output = service(
            home.path(),
            &[action, "--dry-run", "--platform", "launchd"],
            &[],
        );
        assert_eq!(stdout(&output), expected);
    }
}
