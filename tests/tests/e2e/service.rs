//! `corral service ... --dry-run`, run as a process with a temporary HOME: it prints the launchd
//! property list or the systemd unit it would write, the binaries it would install and the exact
//! commands it would run, for a user or a system service, and changes nothing. (Only dry runs
//! here: a real install would call launchctl or systemctl, and a system one needs root.)

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

/// The directory of the built binaries, which `install` copies from.
fn built_dir() -> PathBuf {
    let exe = binary("corral").canonicalize().unwrap();
    exe.parent().unwrap().to_path_buf()
}

/// The name of the user running the tests, for `--system --user`.
fn me() -> String {
    let output = Command::new("id").arg("-un").output().expect("running id");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// `install` stops the old version, then copies each binary under a temporary name and renames
/// it into `prefix`, worker first, then starts the new version: the lines of the dry run, in order.
fn assert_upgrade_order(dry_run: &str, prefix: &Path, stop: &str, start: &str) {
    let lines: Vec<&str> = dry_run.lines().collect();
    let at = |wanted: &str| {
        lines
            .iter()
            .position(|line| *line == wanted)
            .unwrap_or_else(|| panic!("{wanted:?} in:\n{dry_run}"))
    };
    let built = built_dir();
    let mut order = vec![at(stop)];
    for name in ["corral-worker", "corral"] {
        let staging = prefix.join(format!(".{name}.new"));
        order.push(at(&format!(
            "install -m 0755 {} {}",
            built.join(name).display(),
            staging.display()
        )));
        order.push(at(&format!(
            "mv -f {} {}",
            staging.display(),
            prefix.join(name).display()
        )));
    }
    order.push(at(start));
    assert!(order.is_sorted(), "{order:?} in:\n{dry_run}");
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
    let installed = home.path().join(".local/bin/corral");
    assert_eq!(
        arguments,
        [installed.to_str().unwrap(), "serve", "--port", "8081"]
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
    assert_eq!(environment["CORRAL_LOG_DIR"].as_string(), logs.to_str());
    assert_upgrade_order(
        &dry_run,
        &home.path().join(".local/bin"),
        &bootout,
        &bootstrap,
    );
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
        home.path().join(".local/bin/corral").display()
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
            "systemctl --user stop corral.service || true",
            "systemctl --user daemon-reload",
            "systemctl --user enable corral.service",
            "systemctl --user start corral.service",
        ]
    );
    assert_upgrade_order(
        &dry_run,
        &home.path().join(".local/bin"),
        "systemctl --user stop corral.service || true",
        "systemctl --user start corral.service",
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

#[test]
fn a_system_launchd_dry_run_prints_a_daemon_running_as_the_user() {
    let home = tempfile::tempdir().unwrap();
    let user = me();
    let output = service(
        home.path(),
        &[
            "install",
            "--system",
            "--user",
            &user,
            "--dry-run",
            "--platform",
            "launchd",
        ],
        &[],
    );
    let dry_run = stdout(&output);
    let plist_path = Path::new("/Library/LaunchDaemons/com.corral.server.plist");
    let xml = written(&dry_run, plist_path);
    let job = plist::Value::from_reader_xml(xml.as_bytes())
        .expect("a valid property list")
        .into_dictionary()
        .expect("a dictionary");
    assert_eq!(job["UserName"].as_string(), Some(user.as_str()));
    assert!(
        job["GroupName"]
            .as_string()
            .is_some_and(|group| !group.is_empty())
    );
    assert_eq!(
        job["ProgramArguments"].as_array().unwrap()[0].as_string(),
        Some("/usr/local/bin/corral")
    );
    assert_eq!(job["ProcessType"].as_string(), Some("Interactive"));
    assert_eq!(job["ExitTimeOut"].as_unsigned_integer(), Some(45));
    let environment = job["EnvironmentVariables"].as_dictionary().unwrap();
    assert_eq!(
        environment["CORRAL_LOG_DIR"].as_string(),
        Some("/Library/Logs/corral")
    );
    // The user's own home (from the user database, not sudo's HOME) and state directory.
    let user_home = environment["HOME"].as_string().unwrap();
    assert_eq!(
        environment["CORRAL_STATE_DIR"].as_string(),
        Some(format!("{user_home}/Library/Application Support/corral").as_str())
    );
    assert_upgrade_order(
        &dry_run,
        Path::new("/usr/local/bin"),
        "launchctl bootout system/com.corral.server || true",
        "launchctl bootstrap system /Library/LaunchDaemons/com.corral.server.plist",
    );
    assert_untouched(home.path());
}

#[test]
fn a_system_systemd_dry_run_prints_a_sandboxed_unit_and_installs_to_the_prefix() {
    let home = tempfile::tempdir().unwrap();
    let prefix = tempfile::tempdir().unwrap();
    let prefix_arg = prefix.path().to_str().unwrap();
    let user = me();
    let output = service(
        home.path(),
        &[
            "install",
            "--system",
            "--dry-run",
            "--platform",
            "systemd",
            "--prefix",
            prefix_arg,
            "--",
            "--drain-timeout",
            "100",
        ],
        &[("SUDO_USER", &user)],
    );
    let dry_run = stdout(&output);
    let unit = written(&dry_run, Path::new("/etc/systemd/system/corral.service"));
    let exec_start = format!(
        r#"ExecStart="{}" "serve" "--drain-timeout" "100""#,
        prefix.path().join("corral").display()
    );
    let user_line = format!("User={user}");
    for expected in [
        exec_start.as_str(),
        user_line.as_str(),
        "KillMode=mixed",
        "TimeoutStopSec=115",
        "Restart=on-failure",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "WantedBy=multi-user.target",
    ] {
        assert!(
            unit.lines().any(|line| line == expected),
            "{expected:?} in:\n{unit}"
        );
    }
    let writable = unit
        .lines()
        .find_map(|line| line.strip_prefix("ReadWritePaths="))
        .expect("ReadWritePaths");
    assert!(writable.contains("/.local/state/corral\""), "{writable}");
    assert_upgrade_order(
        &dry_run,
        prefix.path(),
        "systemctl stop corral.service || true",
        "systemctl start corral.service",
    );
    assert_untouched(home.path());
    assert_untouched(prefix.path());
}

#[test]
fn a_system_service_needs_a_user() {
    let home = tempfile::tempdir().unwrap();
    let output = service(home.path(), &["status", "--system", "--dry-run"], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("--user"), "{stderr}");
}

#[test]
fn every_action_has_a_dry_run_in_both_scopes() {
    let home = tempfile::tempdir().unwrap();
    let uid = uid(home.path());
    let user = me();
    for (scope, systemctl, journalctl, launchctl) in [
        (
            vec![],
            "systemctl --user",
            "journalctl --user",
            format!("gui/{uid}/com.corral.server"),
        ),
        (
            vec!["--system", "--user", user.as_str()],
            "systemctl",
            "journalctl",
            "system/com.corral.server".to_string(),
        ),
    ] {
        let dry_run = |platform: &str, args: &[&str]| {
            let mut all = args.to_vec();
            all.extend(["--dry-run", "--platform", platform]);
            all.extend(scope.iter().copied());
            stdout(&service(home.path(), &all, &[]))
        };
        for verb in ["status", "start", "stop", "restart"] {
            assert_eq!(
                dry_run("systemd", &[verb]),
                format!("{systemctl} {verb} corral.service\n")
            );
        }
        assert!(dry_run("systemd", &["uninstall"]).starts_with(&format!(
            "{systemctl} disable --now corral.service || true\n"
        )));
        assert_eq!(
            dry_run("systemd", &["logs", "-f", "-n", "20"]),
            format!("{journalctl} -u corral.service -n 20 -f\n")
        );
        assert_eq!(
            dry_run("launchd", &["restart"]).lines().next(),
            Some(format!("launchctl bootout {launchctl} || true").as_str())
        );
        assert!(dry_run("launchd", &["logs", "-f"]).starts_with("tail -n 50 -F "));
    }
    assert_untouched(home.path());
}
