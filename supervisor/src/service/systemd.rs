//! The systemd user unit: `~/.config/systemd/user/<name>.service`, driven by
//! `systemctl --user`. It follows the launchd job: started at login, restarted after a failure
//! but not after the clean exit that ends a drain, and given the drain's time to stop.

use anyhow::Result;

use super::{Action, Definition, Plan, Step, Target};

pub(super) fn plan(target: &Target, action: &Action) -> Result<Plan> {
    let unit = format!("{}.service", target.label);
    let dir = target.home.join(".config/systemd/user");
    let path = dir.join(&unit);
    let systemctl = |verb: &str| Step::run(&["systemctl", "--user", verb, &unit]);
    let steps = match action {
        Action::Install(definition) => vec![
            Step::CreateDir(dir),
            Step::WriteFile {
                path,
                contents: unit_file(definition),
            },
            Step::run(&["systemctl", "--user", "daemon-reload"]),
            systemctl("enable"),
            // `restart` starts a stopped unit and moves a running one to the new definition.
            systemctl("restart"),
        ],
        Action::Uninstall => vec![
            Step::run_may_fail(&["systemctl", "--user", "disable", "--now", &unit]),
            Step::RemoveFile(path),
            Step::run(&["systemctl", "--user", "daemon-reload"]),
        ],
        Action::Status => vec![systemctl("status")],
        Action::Start => vec![systemctl("start")],
        Action::Stop => vec![systemctl("stop")],
    };
    Ok(Plan { steps })
}

fn unit_file(definition: &Definition) -> String {
    let exec_start: Vec<_> = definition.program.iter().map(|arg| quote(arg)).collect();
    let environment: String = definition
        .environment
        .iter()
        .map(|(name, value)| format!("Environment={}\n", quote(&format!("{name}={value}"))))
        .collect();
    format!(
        "# Written by `corral service install`; `corral service uninstall` removes it.\n\
         [Unit]\n\
         Description=corral: local LLMs over the OpenAI API\n\
         \n\
         [Service]\n\
         ExecStart={exec_start}\n\
         WorkingDirectory={working_directory}\n\
         {environment}\
         Restart=on-failure\n\
         RestartSec=5\n\
         # SIGTERM to corral alone: it drains, then stops its workers itself.\n\
         KillMode=mixed\n\
         TimeoutStopSec={timeout}\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        exec_start = exec_start.join(" "),
        working_directory = definition.working_directory.replace('%', "%%"),
        timeout = definition.exit_timeout.as_secs(),
    )
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
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::service::Platform;

    fn target() -> Target {
        Target::new(Platform::Systemd, None, "/home/ada".into(), 1000).unwrap()
    }

    fn definition() -> Definition {
        Definition {
            program: [
                "/opt/corral/corral",
                "serve",
                "--models-dir",
                "/home/ada/my models",
            ]
            .map(String::from)
            .to_vec(),
            environment: BTreeMap::from([
                ("HOME".to_string(), "/home/ada".to_string()),
                ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ]),
            working_directory: "/home/ada".to_string(),
            exit_timeout: Duration::from_secs(45),
        }
    }

    #[test]
    fn install_writes_a_unit_that_restarts_on_failure_and_outlasts_the_drain() {
        let plan = plan(&target(), &Action::Install(definition())).unwrap();
        let Some(Step::WriteFile { path, contents }) = plan.steps.get(1) else {
            panic!("install writes the unit second: {plan:?}");
        };
        assert_eq!(
            path.to_str(),
            Some("/home/ada/.config/systemd/user/corral.service")
        );
        let lines: Vec<_> = contents.lines().collect();
        for expected in [
            "[Service]",
            r#"ExecStart="/opt/corral/corral" "serve" "--models-dir" "/home/ada/my models""#,
            "WorkingDirectory=/home/ada",
            r#"Environment="HOME=/home/ada""#,
            r#"Environment="PATH=/usr/bin:/bin""#,
            "Restart=on-failure",
            "KillMode=mixed",
            "TimeoutStopSec=45",
            "[Install]",
            "WantedBy=default.target",
        ] {
            assert!(lines.contains(&expected), "{expected:?} in\n{contents}");
        }
    }

    #[test]
    fn each_action_runs_its_systemctl_commands() {
        let commands = |action| plan(&target(), &action).unwrap().commands();
        assert_eq!(
            commands(Action::Install(definition())),
            [
                "systemctl --user daemon-reload",
                "systemctl --user enable corral.service",
                "systemctl --user restart corral.service",
            ]
        );
        assert_eq!(
            commands(Action::Uninstall),
            [
                "systemctl --user disable --now corral.service",
                "systemctl --user daemon-reload",
            ]
        );
        assert_eq!(
            commands(Action::Status),
            ["systemctl --user status corral.service"]
        );
        assert_eq!(
            commands(Action::Start),
            ["systemctl --user start corral.service"]
        );
        assert_eq!(
            commands(Action::Stop),
            ["systemctl --user stop corral.service"]
        );
    }

    #[test]
    fn specifiers_variables_and_quotes_are_escaped() {
        assert_eq!(quote(r#"50% of $HOME "x"\"#), r#""50%% of $$HOME \"x\"\\""#);
    }
}
