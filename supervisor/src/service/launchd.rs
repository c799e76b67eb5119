//! The launchd user agent: `~/Library/LaunchAgents/<label>.plist` and the `launchctl` calls on the
//! `gui/<uid>` domain. `launchd/com.corral.server.plist` at the repository root is this writer's
//! output with placeholders; a test keeps the two in step.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::Serialize;

use super::{Action, Definition, Plan, Step, Target, text};

/// The job's keys, in the order they are written. launchd.plist(5) documents each.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct Job<'a> {
    label: &'a str,
    program_arguments: &'a [String],
    environment_variables: &'a BTreeMap<String, String>,
    working_directory: &'a str,
    /// Started at login and at install.
    run_at_load: bool,
    keep_alive: KeepAlive,
    /// launchd's default (20 s on current macOS) is shorter than the drain.
    #[serde(rename = "ExitTimeOut")]
    exit_timeout: u64,
    /// A person is waiting on the tokens: `Interactive` is the class without launchd's resource
    /// limits (that of apps), where `Standard` leaves the default policy in place.
    process_type: &'static str,
    standard_out_path: String,
    standard_error_path: String,
}

/// Restart after any unsuccessful exit: a panic (exit 101), an error exit or a signal. Not after
/// exit 0, which is a drain after SIGTERM: that is how `stop` stops it. (`Crashed` would miss
/// panics, which exit rather than die of a signal.)
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct KeepAlive {
    successful_exit: bool,
}

pub(super) fn plan(target: &Target, action: &Action) -> Result<Plan> {
    let plist = target
        .home
        .join("Library/LaunchAgents")
        .join(format!("{}.plist", target.label));
    let domain = format!("gui/{}", target.uid);
    let service = format!("{domain}/{}", target.label);
    let steps = match action {
        Action::Install(definition) => {
            let plist_text = text(&plist)?;
            vec![
                Step::CreateDir(target.home.join("Library/LaunchAgents")),
                Step::CreateDir(log_dir(target)),
                Step::WriteFile {
                    path: plist.clone(),
                    contents: property_list(target, definition)?,
                },
                // A loaded job keeps its old definition until it is booted out.
                Step::run_may_fail(&["launchctl", "bootout", &service]),
                Step::run(&["launchctl", "bootstrap", &domain, &plist_text]),
            ]
        }
        Action::Uninstall => vec![
            Step::run_may_fail(&["launchctl", "bootout", &service]),
            Step::RemoveFile(plist),
        ],
        Action::Status => vec![Step::run(&["launchctl", "print", &service])],
        // Without `-k`: starting a running server leaves it and its requests alone.
        Action::Start => vec![Step::run(&["launchctl", "kickstart", &service])],
        // SIGTERM drains and exits 0, which KeepAlive does not restart, and the job stays loaded
        // for `start`. (`launchctl stop` sends the same signal but is a legacy subcommand.)
        Action::Stop => vec![Step::run(&["launchctl", "kill", "SIGTERM", &service])],
    };
    Ok(Plan { steps })
}

fn log_dir(target: &Target) -> PathBuf {
    target.home.join("Library/Logs/corral")
}

fn property_list(target: &Target, definition: &Definition) -> Result<String> {
    let logs = log_dir(target);
    let job = Job {
        label: &target.label,
        program_arguments: &definition.program,
        environment_variables: &definition.environment,
        working_directory: &definition.working_directory,
        run_at_load: true,
        keep_alive: KeepAlive {
            successful_exit: false,
        },
        exit_timeout: definition.exit_timeout.as_secs(),
        process_type: "Interactive",
        standard_out_path: text(&logs.join("corral.out.log"))?,
        standard_error_path: text(&logs.join("corral.err.log"))?,
    };
    let mut xml = Vec::new();
    plist::to_writer_xml(&mut xml, &job)
        .with_context(|| format!("writing the property list of {}", target.label))?;
    let mut xml = String::from_utf8(xml).context("the property list writer wrote non-UTF-8")?;
    xml.push('\n');
    Ok(xml)
}

#[cfg(test)]
mod tests;
