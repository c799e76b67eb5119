//! The launchd writer's plans: the property list it installs, the launchctl command of each
//! action, and the repository's template kept in step with what it writes.

use std::time::Duration;

use plist::Value;

use super::*;
use crate::service::Platform;

fn target() -> Target {
    Target::new(Platform::Launchd, None, "/Users/ada".into(), 501).unwrap()
}

fn definition() -> Definition {
    Definition {
        program: [
            "/opt/corral/corral",
            "serve",
            "--models-dir",
            "/Users/ada/models",
        ]
        .map(String::from)
        .to_vec(),
        environment: BTreeMap::from([
            ("CORRAL_DRAIN_TIMEOUT".to_string(), "60".to_string()),
            ("HOME".to_string(), "/Users/ada".to_string()),
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        ]),
        working_directory: "/Users/ada".to_string(),
        exit_timeout: Duration::from_secs(75),
    }
}

fn parse(xml: &str) -> plist::Dictionary {
    Value::from_reader_xml(xml.as_bytes())
        .expect("a valid property list")
        .into_dictionary()
        .expect("a dictionary at the top")
}

fn written_plist(plan: &Plan) -> (&PathBuf, &str) {
    plan.steps
        .iter()
        .find_map(|step| match step {
            Step::WriteFile { path, contents } => Some((path, contents.as_str())),
            _ => None,
        })
        .expect("install writes the plist")
}

#[test]
fn install_writes_a_plist_that_restarts_on_crash_and_outlasts_the_drain() {
    let plan = plan(&target(), &Action::Install(definition())).unwrap();
    let (path, xml) = written_plist(&plan);
    assert_eq!(
        path,
        &PathBuf::from("/Users/ada/Library/LaunchAgents/com.corral.server.plist")
    );
    let job = parse(xml);
    let string = |key: &str| job[key].as_string().unwrap().to_string();
    assert_eq!(string("Label"), "com.corral.server");
    let arguments: Vec<_> = job["ProgramArguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_string().unwrap())
        .collect();
    assert_eq!(arguments, definition().program);
    assert_eq!(job["RunAtLoad"].as_boolean(), Some(true));
    let keep_alive = job["KeepAlive"].as_dictionary().unwrap();
    assert_eq!(keep_alive["SuccessfulExit"].as_boolean(), Some(false));
    assert_eq!(job["ExitTimeOut"].as_unsigned_integer(), Some(75));
    assert_eq!(
        string("StandardOutPath"),
        "/Users/ada/Library/Logs/corral/corral.out.log"
    );
    assert_eq!(
        string("StandardErrorPath"),
        "/Users/ada/Library/Logs/corral/corral.err.log"
    );
    let environment = job["EnvironmentVariables"].as_dictionary().unwrap();
    assert_eq!(environment["CORRAL_DRAIN_TIMEOUT"].as_string(), Some("60"));
    assert_eq!(environment["PATH"].as_string(), Some("/usr/bin:/bin"));
    assert_eq!(string("WorkingDirectory"), "/Users/ada");
    assert_eq!(string("ProcessType"), "Interactive");
}

#[test]
fn install_creates_the_log_directory_and_reloads_the_job() {
    let plan = plan(&target(), &Action::Install(definition())).unwrap();
    assert!(
        plan.steps
            .contains(&Step::CreateDir("/Users/ada/Library/Logs/corral".into()))
    );
    assert_eq!(
        plan.commands(),
        [
            "launchctl bootout gui/501/com.corral.server",
            "launchctl bootstrap gui/501 /Users/ada/Library/LaunchAgents/com.corral.server.plist",
        ]
    );
}

#[test]
fn each_action_runs_its_launchctl_command() {
    let commands = |action| plan(&target(), &action).unwrap().commands();
    assert_eq!(
        commands(Action::Uninstall),
        ["launchctl bootout gui/501/com.corral.server"]
    );
    assert_eq!(
        commands(Action::Status),
        ["launchctl print gui/501/com.corral.server"]
    );
    assert_eq!(
        commands(Action::Start),
        ["launchctl kickstart gui/501/com.corral.server"]
    );
    assert_eq!(
        commands(Action::Stop),
        ["launchctl kill SIGTERM gui/501/com.corral.server"]
    );
    let uninstall = plan(&target(), &Action::Uninstall).unwrap();
    assert_eq!(
        uninstall.steps.last(),
        Some(&Step::RemoveFile(
            "/Users/ada/Library/LaunchAgents/com.corral.server.plist".into()
        ))
    );
}

#[test]
fn the_repository_template_is_what_the_writer_writes() {
    let target = Target::new(Platform::Launchd, None, "__HOME__".into(), 501).unwrap();
    let placeholders = Definition {
        program: ["__CORRAL_BINARY__", "serve"].map(String::from).to_vec(),
        environment: BTreeMap::from([
            ("HOME".to_string(), "__HOME__".to_string()),
            ("PATH".to_string(), "__PATH__".to_string()),
        ]),
        working_directory: "__WORKING_DIRECTORY__".to_string(),
        exit_timeout: crate::service::exit_timeout(&crate::config::Config::default()),
    };
    let written = property_list(&target, &placeholders).unwrap();
    let template = include_str!("../../../../launchd/com.corral.server.plist");
    assert_eq!(parse(&written), parse(template), "written:\n{written}");
}
