//! What the launchd and systemd writers' tests share: a service user and what a service of
//! theirs runs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::*;

pub(super) fn account(home: &str) -> Account {
    Account {
        name: "ada".into(),
        group: "staff".into(),
        uid: 501,
        gid: 20,
        home: home.into(),
    }
}

/// A service of the user whose home is `home`, its binaries built in `/src/corral/target` and
/// installed to `prefix`.
pub(super) fn definition(home: &str, prefix: &str) -> Definition {
    let prefix = PathBuf::from(prefix);
    Definition {
        program: [
            prefix.join("corral").to_str().unwrap(),
            "serve",
            "--models-dir",
            &format!("{home}/my models"),
        ]
        .map(String::from)
        .to_vec(),
        environment: BTreeMap::from([
            ("CORRAL_DRAIN_TIMEOUT".to_string(), "60".to_string()),
            ("HOME".to_string(), home.to_string()),
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        ]),
        working_directory: home.to_string(),
        exit_timeout: Duration::from_secs(75),
        built: "/src/corral/target/release".into(),
        prefix,
        state_dir: format!("{home}/state"),
        writable: vec![],
        log_dir: None,
    }
}

/// The index of the first step that `is`, for checking the order of a plan.
pub(super) fn position(plan: &Plan, is: impl Fn(&Step) -> bool) -> usize {
    plan.steps
        .iter()
        .position(is)
        .unwrap_or_else(|| panic!("no such step in {plan:#?}"))
}

/// An install that finds an older version running stops it (a drain) before it swaps the
/// binaries, worker first, and starts the new version only after both are in place.
pub(super) fn assert_upgrades_in_place(plan: &Plan, stop: &str, start: &str) {
    let run = |line: &str| {
        let line = line.to_owned();
        move |step: &Step| matches!(step, Step::Run { argv, .. } if argv.join(" ") == line)
    };
    let installs = |name: &'static str| {
        move |step: &Step| {
            matches!(step, Step::InstallBinary { from, to }
                if from == &PathBuf::from("/src/corral/target/release").join(name)
                    && to.file_name().is_some_and(|file| file == name))
        }
    };
    let stopped = position(plan, run(stop));
    let worker = position(plan, installs("corral-worker"));
    let corral = position(plan, installs("corral"));
    let started = position(plan, run(start));
    assert!(
        stopped < worker && worker < corral && corral < started,
        "{plan:#?}"
    );
    assert!(
        matches!(&plan.steps[stopped], Step::Run { may_fail: true, .. }),
        "a first install has nothing to stop"
    );
}

#[test]
fn install_from_the_prefix_itself_copies_nothing() {
    let mut definition = definition("/home/ada", "/home/ada/.local/bin");
    assert_eq!(install_binaries(&definition).len(), 3);
    definition.built = definition.prefix.clone();
    assert!(install_binaries(&definition).is_empty());
}

#[test]
fn logs_come_from_files_under_launchd_or_when_named_and_from_the_journal_under_systemd() {
    let user = Target::user(Platform::Systemd, None, "/home/ada".into(), 1000).unwrap();
    assert_eq!(
        log_source(&user, None, 20, true),
        LogSource::Journal(
            [
                "journalctl",
                "--user",
                "-u",
                "corral.service",
                "-n",
                "20",
                "-f"
            ]
            .map(String::from)
            .to_vec()
        )
    );
    let system = Target::system(Platform::Systemd, None, account("/home/ada")).unwrap();
    assert_eq!(
        log_source(&system, None, 50, false),
        LogSource::Journal(
            ["journalctl", "-u", "corral.service", "-n", "50"]
                .map(String::from)
                .to_vec()
        )
    );
    assert_eq!(
        log_source(&system, Some("/var/log/corral".into()), 50, false),
        LogSource::Files("/var/log/corral".into())
    );
    let agent = Target::user(Platform::Launchd, None, "/Users/ada".into(), 501).unwrap();
    assert_eq!(
        log_source(&agent, None, 50, true),
        LogSource::Files("/Users/ada/Library/Logs/corral".into())
    );
    let daemon = Target::system(Platform::Launchd, None, account("/Users/ada")).unwrap();
    assert_eq!(
        log_source(&daemon, None, 50, true),
        LogSource::Files("/Library/Logs/corral".into())
    );
}
