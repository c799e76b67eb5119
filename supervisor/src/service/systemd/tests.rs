//! The systemd writer's plans: the unit it installs (parsed into sections and keys), the
//! systemctl commands of each action for a user and a system unit, and the upgrade's order.

use std::collections::BTreeMap;

use super::*;
use crate::service::tests::{account, assert_upgrades_in_place, definition};
use crate::service::{Definition, Platform};

fn user() -> Target {
    Target::user(Platform::Systemd, None, "/home/ada".into(), 1000).unwrap()
}

fn system() -> Target {
    Target::system(Platform::Systemd, None, account("/home/ada")).unwrap()
}

fn system_definition() -> Definition {
    let mut definition = definition("/home/ada", "/usr/local/bin");
    definition.writable = vec!["/var/log/corral".into()];
    definition
}

/// A unit file as systemd reads it: `[Section]` headers, `Key=value` lines (a key may repeat),
/// `#` comments and blank lines. Anything else fails the test.
type Unit = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn parse(text: &str) -> Unit {
    let mut unit = Unit::new();
    let mut section = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.to_owned());
            unit.entry(name.to_owned()).or_default();
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("{line:?}"));
        let section = section.as_ref().expect("a key before any section");
        unit.get_mut(section)
            .unwrap()
            .entry(key.to_owned())
            .or_default()
            .push(value.to_owned());
    }
    unit
}

fn written_unit(plan: &Plan) -> (&PathBuf, Unit) {
    plan.steps
        .iter()
        .find_map(|step| match step {
            Step::WriteFile { path, contents } => Some((path, parse(contents))),
            _ => None,
        })
        .expect("install writes the unit")
}

fn one<'a>(unit: &'a Unit, section: &str, key: &str) -> &'a str {
    match unit[section].get(key).map(Vec::as_slice) {
        Some([value]) => value,
        other => panic!("[{section}] {key}: {other:?}"),
    }
}

#[test]
fn a_user_unit_restarts_on_failure_and_outlasts_the_drain() {
    let plan = plan(
        &user(),
        &Action::Install(Box::new(definition("/home/ada", "/home/ada/.local/bin"))),
    )
    .unwrap();
    let (path, unit) = written_unit(&plan);
    assert_eq!(
        path.to_str(),
        Some("/home/ada/.config/systemd/user/corral.service")
    );
    assert_eq!(
        one(&unit, "Service", "ExecStart"),
        r#""/home/ada/.local/bin/corral" "serve" "--models-dir" "/home/ada/my models""#
    );
    assert_eq!(one(&unit, "Service", "WorkingDirectory"), "/home/ada");
    assert_eq!(
        unit["Service"]["Environment"],
        [
            r#""CORRAL_DRAIN_TIMEOUT=60""#,
            r#""HOME=/home/ada""#,
            r#""PATH=/usr/bin:/bin""#
        ]
    );
    assert_eq!(one(&unit, "Service", "Restart"), "on-failure");
    assert_eq!(one(&unit, "Service", "KillMode"), "mixed");
    assert_eq!(one(&unit, "Service", "TimeoutStopSec"), "75");
    assert_eq!(one(&unit, "Install", "WantedBy"), "default.target");
    for key in ["User", "ProtectSystem", "ReadWritePaths"] {
        assert!(!unit["Service"].contains_key(key), "{key} in a user unit");
    }
}

#[test]
fn a_system_unit_runs_as_its_user_sandboxed_with_its_directories_writable() {
    let plan = plan(&system(), &Action::Install(Box::new(system_definition()))).unwrap();
    let (path, unit) = written_unit(&plan);
    assert_eq!(path.to_str(), Some("/etc/systemd/system/corral.service"));
    assert_eq!(one(&unit, "Service", "User"), "ada");
    assert_eq!(one(&unit, "Service", "Group"), "staff");
    assert_eq!(
        one(&unit, "Service", "ExecStart"),
        r#""/usr/local/bin/corral" "serve" "--models-dir" "/home/ada/my models""#
    );
    assert_eq!(one(&unit, "Service", "KillMode"), "mixed");
    assert_eq!(one(&unit, "Service", "Restart"), "on-failure");
    // Longer than the 60 s drain the service gets from its environment.
    assert_eq!(one(&unit, "Service", "TimeoutStopSec"), "75");
    assert_eq!(one(&unit, "Service", "NoNewPrivileges"), "yes");
    assert_eq!(one(&unit, "Service", "ProtectSystem"), "strict");
    assert_eq!(one(&unit, "Service", "PrivateTmp"), "yes");
    assert_eq!(
        one(&unit, "Service", "ReadWritePaths"),
        r#""/home/ada/state" "/var/log/corral" "-/home/ada/.cache/huggingface""#
    );
    assert_eq!(one(&unit, "Install", "WantedBy"), "multi-user.target");
    // ReadWritePaths needs them to exist; the service's user owns what install creates.
    for dir in ["/home/ada/state", "/var/log/corral"] {
        assert!(plan.steps.contains(&Step::CreateOwnedDir {
            path: dir.into(),
            owner: "ada".into(),
            group: "staff".into(),
            uid: 501,
            gid: 20,
        }));
    }
}

#[test]
fn install_stops_the_old_version_swaps_the_binaries_then_starts() {
    let plan = plan(
        &user(),
        &Action::Install(Box::new(definition("/home/ada", "/home/ada/.local/bin"))),
    )
    .unwrap();
    assert_eq!(
        plan.commands(),
        [
            "systemctl --user stop corral.service",
            "systemctl --user daemon-reload",
            "systemctl --user enable corral.service",
            "systemctl --user start corral.service",
        ]
    );
    assert_upgrades_in_place(
        &plan,
        "systemctl --user stop corral.service",
        "systemctl --user start corral.service",
    );

    let plan = super::plan(&system(), &Action::Install(Box::new(system_definition()))).unwrap();
    assert_eq!(
        plan.commands(),
        [
            "systemctl stop corral.service",
            "systemctl daemon-reload",
            "systemctl enable corral.service",
            "systemctl start corral.service",
        ]
    );
    assert_upgrades_in_place(
        &plan,
        "systemctl stop corral.service",
        "systemctl start corral.service",
    );
}

#[test]
fn each_action_runs_its_systemctl_command_in_both_scopes() {
    for (target, systemctl, dir) in [
        (user(), "systemctl --user", "/home/ada/.config/systemd/user"),
        (system(), "systemctl", "/etc/systemd/system"),
    ] {
        let commands = |action| plan(&target, &action).unwrap().commands();
        assert_eq!(
            commands(Action::Uninstall),
            [
                format!("{systemctl} disable --now corral.service"),
                format!("{systemctl} daemon-reload"),
            ]
        );
        for (action, verb) in [
            (Action::Status, "status"),
            (Action::Start, "start"),
            (Action::Stop, "stop"),
            (Action::Restart, "restart"),
        ] {
            assert_eq!(
                commands(action),
                [format!("{systemctl} {verb} corral.service")]
            );
        }
        let uninstall = plan(&target, &Action::Uninstall).unwrap();
        assert!(
            uninstall
                .steps
                .contains(&Step::RemoveFile(format!("{dir}/corral.service").into()))
        );
    }
}

#[test]
fn specifiers_variables_and_quotes_are_escaped() {
    assert_eq!(quote(r#"50% of $HOME "x"\"#), r#""50%% of $$HOME \"x\"\\""#);
    assert_eq!(quote_path("/a $b/50%"), r#""/a $b/50%%""#);
}
