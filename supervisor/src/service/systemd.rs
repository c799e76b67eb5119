//! systemd: a user unit (`~/.config/systemd/user/<name>.service`, `systemctl --user`) or a
//! system unit (`/etc/systemd/system/<name>.service`, `systemctl`) that starts at boot as the
//! account's user. Both follow the launchd job: restarted after a failure but not after the clean
//! exit that ends a drain, and given the drain's time to stop. The journal keeps the log.

use std::path::PathBuf;

use anyhow::Result;

use super::{Action, Definition, Plan, Scope, Step, Target, install_binaries};

pub(super) fn plan(target: &Target, action: &Action) -> Result<Plan> {
    let unit = format!("{}.service", target.label);
    let dir = unit_dir(target);
    let path = dir.join(&unit);
    let systemctl = |verbs: &[&str]| Step::Run {
        argv: systemctl_argv(target, verbs),
        may_fail: false,
    };
    let steps = match action {
        Action::Install(definition) => {
            let mut steps = Vec::new();
            match target.account() {
                None => steps.push(Step::CreateDir(dir)),
                // ProtectSystem=strict cannot make a missing directory writable.
                Some(account) => {
                    steps.extend(writable_dirs(definition).map(|path| Step::CreateOwnedDir {
                        path: path.into(),
                        owner: account.name.clone(),
                        group: account.group.clone(),
                        uid: account.uid,
                        gid: account.gid,
                    }))
                }
            }
            // Stopped (it drains) before the swap: a running corral would start the new worker.
            steps.push(Step::Run {
                argv: systemctl_argv(target, &["stop", &unit]),
                may_fail: true,
            });
            steps.extend(install_binaries(definition));
            steps.push(Step::WriteFile {
                path,
                contents: unit_file(target, definition),
            });
            steps.push(systemctl(&["daemon-reload"]));
            steps.push(systemctl(&["enable", &unit]));
            steps.push(systemctl(&["start", &unit]));
            steps
        }
        Action::Uninstall => vec![
            Step::Run {
                argv: systemctl_argv(target, &["disable", "--now", &unit]),
                may_fail: true,
            },
            Step::RemoveFile(path),
            systemctl(&["daemon-reload"]),
        ],
        Action::Status => vec![systemctl(&["status", &unit])],
        Action::Start => vec![systemctl(&["start", &unit])],
        Action::Stop => vec![systemctl(&["stop", &unit])],
        Action::Restart => vec![systemctl(&["restart", &unit])],
    };
    Ok(Plan { steps })
}

fn unit_dir(target: &Target) -> PathBuf {
    match target.scope {
        Scope::User => target.home.join(".config/systemd/user"),
        Scope::System(_) => PathBuf::from("/etc/systemd/system"),
    }
}

fn systemctl_argv(target: &Target, verbs: &[&str]) -> Vec<String> {
    let mut argv = vec!["systemctl".to_string()];
    if target.scope == Scope::User {
        argv.push("--user".into());
    }
    argv.extend(verbs.iter().map(|verb| verb.to_string()));
    argv
}

/// `corral service logs`: the unit's journal.
pub(super) fn journalctl(target: &Target, lines: usize, follow: bool) -> Vec<String> {
    let mut argv = vec!["journalctl".to_string()];
    if target.scope == Scope::User {
        argv.push("--user".into());
    }
    let unit = format!("{}.service", target.label);
    argv.extend(["-u".into(), unit, "-n".into(), lines.to_string()]);
    if follow {
        argv.push("-f".into());
    }
    argv
}

/// What a system unit writes: the state directory (its worker sockets are under it) and any
/// configured log or prefix cache directory.
fn writable_dirs(definition: &Definition) -> impl Iterator<Item = &String> {
    std::iter::once(&definition.state_dir).chain(&definition.writable)
}

fn unit_file(target: &Target, definition: &Definition) -> String {
    let exec_start: Vec<_> = definition.program.iter().map(|arg| quote(arg)).collect();
    let environment: String = definition
        .environment
        .iter()
        .map(|(name, value)| format!("Environment={}\n", quote(&format!("{name}={value}"))))
        .collect();
    let (account, wanted_by) = match target.account() {
        None => (String::new(), "default.target"),
        Some(account) => (system_section(account, definition), "multi-user.target"),
    };
    format!(
        "# Written by `corral service install`; `corral service uninstall` removes it.\n\
         [Unit]\n\
         Description=corral: local LLMs over the OpenAI API\n\
         \n\
         [Service]\n\
         ExecStart={exec_start}\n\
         WorkingDirectory={working_directory}\n\
         {environment}\
         {account}\
         Restart=on-failure\n\
         RestartSec=5\n\
         # SIGTERM to corral alone: it drains, then stops its workers itself.\n\
         KillMode=mixed\n\
         TimeoutStopSec={timeout}\n\
         \n\
         [Install]\n\
         WantedBy={wanted_by}\n",
        exec_start = exec_start.join(" "),
        working_directory = definition.working_directory.replace('%', "%%"),
        timeout = definition.exit_timeout.as_secs(),
    )
}

/// A system unit's user and its sandbox: the file system is read-only but for the directories
/// corral writes (its worker sockets live in the state directory, which stays writable, so the
/// supervisor and its workers still meet there), `/tmp` is the unit's own, and no process of it
/// can gain privileges. The Hugging Face cache is writable where it exists, for pulls.
fn system_section(account: &super::Account, definition: &Definition) -> String {
    let hub = account.home.join(".cache/huggingface");
    let writable: Vec<String> = writable_dirs(definition)
        .cloned()
        // `-`: no error when it does not exist.
        .chain(std::iter::once(format!("-{}", hub.to_string_lossy())))
        .map(|dir| quote_path(&dir))
        .collect();
    format!(
        "User={user}\n\
         Group={group}\n\
         NoNewPrivileges=yes\n\
         ProtectSystem=strict\n\
         ReadWritePaths={writable}\n\
         PrivateTmp=yes\n",
        user = account.name,
        group = account.group,
        writable = writable.join(" "),
    )
}

/// A path in a list of paths, where `%` starts a specifier but `$` is no variable.
fn quote_path(path: &str) -> String {
    quote(path).replace("$$", "$")
}

/// One double-quoted word of a unit file, where `%` starts a specifier and `$` a variable.
fn quote(word: &str) -> String {
    let mut quoted = String::from("\"");
    for c in word.chars() {
        match c {
            '\\' => quoted.push_str(r"\\"),
            '"' => quoted.push_str("\\\""),
            '\n' => quoted.push_str(r"\n"),
            '%' => quoted.push_str("%%"),
            '$' => quoted.push_str("$$"),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests;
