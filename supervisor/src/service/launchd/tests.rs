//! The launchd writer's plans: the property lists it installs (parsed, key by key), the
//! launchctl commands of each action for an agent and a daemon, the upgrade's order, and the
//! repository's templates kept in step with what it writes.

use plist::{Dictionary, Value};

use super::*;
use crate::service::tests::{account, assert_upgrades_in_place, definition};
use crate::service::{Definition, Platform};

fn agent() -> Target {
    Target::user(Platform::Launchd, None, "/Users/ada".into(), 501).unwrap()
}

fn daemon() -> Target {
    Target::system(Platform::Launchd, None, account("/Users/ada")).unwrap()
}

fn agent_definition() -> Definition {
    definition("/Users/ada", "/Users/ada/.local/bin")
}

fn daemon_definition() -> Definition {
    let mut definition = definition("/Users/ada", "/usr/local/bin");
    definition.environment.insert(
        "CORRAL_STATE_DIR".into(),
        "/Users/ada/Library/Application Support/corral".into(),
    );
    definition
}

fn parse(xml: &str) -> Dictionary {
    Value::from_reader_xml(xml.as_bytes())
        .expect("a valid property list")
        .into_dictionary()
        .expect("a dictionary at the top")
}

fn written_plist(plan: &Plan) -> (&PathBuf, Dictionary) {
    plan.steps
        .iter()
        .find_map(|step| match step {
            Step::WriteFile { path, contents } => Some((path, parse(contents))),
            _ => None,
        })
        .expect("install writes the plist")
}

fn string<'a>(job: &'a Dictionary, key: &str) -> &'a str {
    job[key]
        .as_string()
        .unwrap_or_else(|| panic!("{key} is a string"))
}

/// The keys both kinds of job have, with the values both have.
fn assert_common_keys(job: &Dictionary, definition: &Definition, logs: &str) {
    assert_eq!(string(job, "Label"), "com.corral.server");
    let arguments: Vec<_> = job["ProgramArguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_string().unwrap())
        .collect();
    assert_eq!(arguments, definition.program);
    assert_eq!(job["RunAtLoad"].as_boolean(), Some(true));
    let keep_alive = job["KeepAlive"].as_dictionary().unwrap();
    assert_eq!(keep_alive["SuccessfulExit"].as_boolean(), Some(false));
    assert_eq!(job["ExitTimeOut"].as_unsigned_integer(), Some(75));
    assert_eq!(string(job, "ProcessType"), "Interactive");
    assert_eq!(string(job, "WorkingDirectory"), "/Users/ada");
    assert_eq!(
        string(job, "StandardOutPath"),
        format!("{logs}/corral.out.log")
    );
    assert_eq!(
        string(job, "StandardErrorPath"),
        format!("{logs}/corral.err.log")
    );
    let environment = job["EnvironmentVariables"].as_dictionary().unwrap();
    assert_eq!(environment["CORRAL_DRAIN_TIMEOUT"].as_string(), Some("60"));
    assert_eq!(environment["PATH"].as_string(), Some("/usr/bin:/bin"));
    assert_eq!(environment["HOME"].as_string(), Some("/Users/ada"));
    assert_eq!(environment["CORRAL_LOG_DIR"].as_string(), Some(logs));
}

#[test]
fn an_agent_runs_the_installed_copy_restarts_on_crash_and_outlasts_the_drain() {
    let plan = plan(&agent(), &Action::Install(Box::new(agent_definition()))).unwrap();
    let (path, job) = written_plist(&plan);
    assert_eq!(
        path,
        &PathBuf::from("/Users/ada/Library/LaunchAgents/com.corral.server.plist")
    );
    assert_common_keys(&job, &agent_definition(), "/Users/ada/Library/Logs/corral");
    assert!(!job.contains_key("UserName") && !job.contains_key("GroupName"));
}

#[test]
fn a_daemon_runs_as_its_user_with_that_users_state_and_system_logs() {
    let plan = plan(&daemon(), &Action::Install(Box::new(daemon_definition()))).unwrap();
    let (path, job) = written_plist(&plan);
    assert_eq!(
        path,
        &PathBuf::from("/Library/LaunchDaemons/com.corral.server.plist")
    );
    assert_common_keys(&job, &daemon_definition(), "/Library/Logs/corral");
    assert_eq!(string(&job, "UserName"), "ada");
    assert_eq!(string(&job, "GroupName"), "staff");
    assert_eq!(
        job["ProgramArguments"].as_array().unwrap()[0].as_string(),
        Some("/usr/local/bin/corral")
    );
    let environment = job["EnvironmentVariables"].as_dictionary().unwrap();
    assert_eq!(
        environment["CORRAL_STATE_DIR"].as_string(),
        Some("/Users/ada/Library/Application Support/corral")
    );
    let keys: Vec<_> = job.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "Label",
            "UserName",
            "GroupName",
            "ProgramArguments",
            "EnvironmentVariables",
            "WorkingDirectory",
            "RunAtLoad",
            "KeepAlive",
            "ExitTimeOut",
            "ProcessType",
            "StandardOutPath",
            "StandardErrorPath",
        ]
    );
    // The daemon's user writes the logs in a directory root creates.
    assert!(plan.steps.contains(&Step::CreateOwnedDir {
        path: "/Library/Logs/corral".into(),
        owner: "ada".into(),
        group: "staff".into(),
        uid: 501,
        gid: 20,
    }));
}

#[test]
fn a_configured_log_directory_is_left_to_the_configuration() {
    let mut definition = agent_definition();
    definition.log_dir = Some("/var/log/corral".into());
    let plan = plan(&agent(), &Action::Install(Box::new(definition))).unwrap();
    let (_, job) = written_plist(&plan);
    let environment = job["EnvironmentVariables"].as_dictionary().unwrap();
    assert!(!environment.contains_key("CORRAL_LOG_DIR"));
}

#[test]
fn install_stops_the_old_version_swaps_the_binaries_then_bootstraps() {
    let plan = plan(&agent(), &Action::Install(Box::new(agent_definition()))).unwrap();
    assert_eq!(
        plan.commands(),
        [
            "launchctl bootout gui/501/com.corral.server",
            "launchctl bootstrap gui/501 /Users/ada/Library/LaunchAgents/com.corral.server.plist",
        ]
    );
    assert!(
        plan.steps
            .contains(&Step::CreateDir("/Users/ada/Library/Logs/corral".into()))
    );
    assert_upgrades_in_place(
        &plan,
        "launchctl bootout gui/501/com.corral.server",
        "launchctl bootstrap gui/501 /Users/ada/Library/LaunchAgents/com.corral.server.plist",
    );

    let plan = super::plan(&daemon(), &Action::Install(Box::new(daemon_definition()))).unwrap();
    assert_eq!(
        plan.commands(),
        [
            "launchctl bootout system/com.corral.server",
            "launchctl bootstrap system /Library/LaunchDaemons/com.corral.server.plist",
        ]
    );
    assert_upgrades_in_place(
        &plan,
        "launchctl bootout system/com.corral.server",
        "launchctl bootstrap system /Library/LaunchDaemons/com.corral.server.plist",
    );
}

#[test]
fn each_action_runs_its_launchctl_commands_in_both_domains() {
    for (target, service, plist) in [
        (
            agent(),
            "gui/501/com.corral.server",
            "/Users/ada/Library/LaunchAgents/com.corral.server.plist",
        ),
        (
            daemon(),
            "system/com.corral.server",
            "/Library/LaunchDaemons/com.corral.server.plist",
        ),
    ] {
        let domain = service.trim_end_matches("/com.corral.server");
        let commands = |action| plan(&target, &action).unwrap().commands();
        assert_eq!(
            commands(Action::Uninstall),
            [format!("launchctl bootout {service}")]
        );
        assert_eq!(
            commands(Action::Status),
            [format!("launchctl print {service}")]
        );
        assert_eq!(
            commands(Action::Start),
            [format!("launchctl kickstart {service}")]
        );
        assert_eq!(
            commands(Action::Stop),
            [format!("launchctl kill SIGTERM {service}")]
        );
        assert_eq!(
            commands(Action::Restart),
            [
                format!("launchctl bootout {service}"),
                format!("launchctl bootstrap {domain} {plist}"),
            ]
        );
        let uninstall = plan(&target, &Action::Uninstall).unwrap();
        assert_eq!(
            uninstall.steps.last(),
            Some(&Step::RemoveFile(plist.into()))
        );
    }
}

/// `definition` with the repository templates' placeholders.
fn placeholders(target: &Target) -> Definition {
    let home = target.home.to_str().unwrap();
    let mut definition = definition(home, "__PREFIX__");
    definition.program = ["__PREFIX__/corral", "serve"].map(String::from).to_vec();
    definition.environment = BTreeMap::from([
        ("HOME".to_string(), "__HOME__".to_string()),
        ("PATH".to_string(), "__PATH__".to_string()),
    ]);
    if target.account().is_some() {
        definition
            .environment
            .insert("CORRAL_STATE_DIR".into(), "__STATE_DIR__".into());
    }
    definition.working_directory = "__WORKING_DIRECTORY__".to_string();
    definition.exit_timeout = crate::service::exit_timeout(&crate::config::Config::default());
    definition
}

#[test]
fn the_repository_templates_are_what_the_writer_writes() {
    let agent = Target::user(Platform::Launchd, None, "__HOME__".into(), 501).unwrap();
    let written = property_list(&agent, &placeholders(&agent)).unwrap();
    let template = include_str!("../../../../launchd/com.corral.server.plist");
    assert_eq!(parse(&written), parse(template), "written:\n{written}");

    let mut account = account("__HOME__");
    account.name = "__USER__".into();
    account.group = "__GROUP__".into();
    let daemon = Target::system(Platform::Launchd, None, account).unwrap();
    let written = property_list(&daemon, &placeholders(&daemon)).unwrap();
    let template = include_str!("../../../../launchd/com.corral.server.daemon.plist");
    assert_eq!(parse(&written), parse(template), "written:\n{written}");
}
