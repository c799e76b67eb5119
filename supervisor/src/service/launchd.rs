//! launchd: a user agent (`~/Library/LaunchAgents/<label>.plist`, the `gui/<uid>` domain) or a
//! system daemon (`/Library/LaunchDaemons/<label>.plist`, the `system` domain, run as the
//! account's user). The files at `launchd/` in the repository are this writer's output with
//! placeholders; a test keeps them in step.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::Serialize;

use super::definition::text;
use super::{Action, Definition, Plan, Scope, Step, Target, install_binaries};

/// The job's keys, in the order they are written. launchd.plist(5) documents each.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct Job<'a> {
    label: &'a str,
    /// A daemon's user and group; an agent runs as the user who loaded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    user_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group_name: Option<&'a str>,
    program_arguments: &'a [String],
    environment_variables: &'a BTreeMap<String, String>,
    working_directory: &'a str,
    /// Started when loaded: at login for an agent, at boot for a daemon, and at install.
    run_at_load: bool,
    keep_alive: KeepAlive,
    /// launchd's default (20 s on current macOS) is shorter than the drain.
    #[serde(rename = "ExitTimeOut")]
    exit_timeout: u64,
    /// A person is waiting on the tokens: `Interactive` is the class without launchd's resource
    /// limits (that of apps), where `Standard` leaves the default policy in place.
    process_type: &'static str,
    /// Only what bypasses the log files: a panic, or an error before logging starts.
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
    let plist = plist_path(target);
    let domain = match target.scope {
        Scope::User => format!("gui/{}", target.uid),
        Scope::System(_) => "system".to_string(),
    };
    let service = format!("{domain}/{}", target.label);
    let plist_text = text(&plist)?;
    // `bootout` stops the job (SIGTERM, so it drains, then SIGKILL after ExitTimeOut) and
    // unloads it; a loaded job keeps its old definition until then.
    let bootout = Step::run_may_fail(&["launchctl", "bootout", &service]);
    let bootstrap = Step::run(&["launchctl", "bootstrap", &domain, &plist_text]);
    let steps = match action {
        Action::Install(definition) => {
            let mut steps = Vec::new();
            if let Some(dir) = plist.parent().filter(|_| target.scope == Scope::User) {
                steps.push(Step::CreateDir(dir.to_path_buf()));
            }
            steps.push(log_dir_step(target));
            // Stopped before the swap: a running corral would start the new worker.
            steps.push(bootout);
            steps.extend(install_binaries(definition));
            steps.push(Step::WriteFile {
                path: plist.clone(),
                contents: property_list(target, definition)?,
            });
            steps.push(bootstrap);
            steps
        }
        Action::Uninstall => vec![bootout, Step::RemoveFile(plist)],
        Action::Status => vec![Step::run(&["launchctl", "print", &service])],
        // Without `-k`: starting a running server leaves it and its requests alone.
        Action::Start => vec![Step::run(&["launchctl", "kickstart", &service])],
        // SIGTERM drains and exits 0, which KeepAlive does not restart, and the job stays loaded
        // for `start`. (`launchctl stop` sends the same signal but is a legacy subcommand.)
        Action::Stop => vec![Step::run(&["launchctl", "kill", "SIGTERM", &service])],
        // Not `kickstart -k`, which does not wait for the drain: bootout waits up to ExitTimeOut.
        Action::Restart => vec![bootout, bootstrap],
    };
    Ok(Plan { steps })
}

fn plist_path(target: &Target) -> PathBuf {
    let dir = match target.scope {
        Scope::User => target.home.join("Library/LaunchAgents"),
        Scope::System(_) => PathBuf::from("/Library/LaunchDaemons"),
    };
    dir.join(format!("{}.plist", target.label))
}

/// Where the job's logs go: corral's rotated files and the two launchd captures.
pub(super) fn log_dir(target: &Target) -> PathBuf {
    match target.scope {
        Scope::User => target.home.join("Library/Logs/corral"),
        Scope::System(_) => PathBuf::from("/Library/Logs/corral"),
    }
}

/// A daemon writes its logs as its user, into a directory root creates.
fn log_dir_step(target: &Target) -> Step {
    let path = log_dir(target);
    match target.account() {
        None => Step::CreateDir(path),
        Some(account) => Step::CreateOwnedDir {
            path,
            owner: account.name.clone(),
            group: account.group.clone(),
            uid: account.uid,
            gid: account.gid,
        },
    }
}

fn property_list(target: &Target, definition: &Definition) -> Result<String> {
    let logs = log_dir(target);
    let mut environment = definition.environment.clone();
    // corral's rotated files, unless the configuration puts them elsewhere.
    if definition.log_dir.is_none() {
        environment.insert("CORRAL_LOG_DIR".into(), text(&logs)?);
    }
    let account = target.account();
    let job = Job {
        label: &target.label,
        user_name: account.map(|account| account.name.as_str()),
        group_name: account.map(|account| account.group.as_str()),
        program_arguments: &definition.program,
        environment_variables: &environment,
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
