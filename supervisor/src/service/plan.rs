//! A service action as data: the directories, files and commands it takes, in order. Building the
//! plan touches nothing, so `--dry-run` prints the very steps `execute` would take, and the tests
//! check plans rather than launchd's or systemd's state.

use std::fmt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    CreateDir(PathBuf),
    WriteFile {
        path: PathBuf,
        contents: String,
    },
    /// Removing a file that is already gone is not an error.
    RemoveFile(PathBuf),
    /// A command, program first. `may_fail` steps undo a state that may not exist (unloading a
    /// service that is not loaded), so their failure is expected and their output is hidden.
    Run {
        argv: Vec<String>,
        may_fail: bool,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
}

impl Plan {
    pub fn execute(&self) -> Result<()> {
        self.steps.iter().try_for_each(Step::execute)
    }

    /// The command lines of the plan, as the dry run prints them.
    #[cfg(test)]
    pub(crate) fn commands(&self) -> Vec<String> {
        self.steps
            .iter()
            .filter_map(|step| match step {
                Step::Run { argv, .. } => Some(shell_line(argv)),
                _ => None,
            })
            .collect()
    }
}

impl Step {
    pub fn run(argv: &[&str]) -> Self {
        Step::Run {
            argv: argv.iter().map(|arg| arg.to_string()).collect(),
            may_fail: false,
        }
    }

    pub fn run_may_fail(argv: &[&str]) -> Self {
        Step::Run {
            argv: argv.iter().map(|arg| arg.to_string()).collect(),
            may_fail: true,
        }
    }

    fn execute(&self) -> Result<()> {
        match self {
            Step::CreateDir(path) => std::fs::create_dir_all(path)
                .with_context(|| format!("creating {}", path.display())),
            Step::WriteFile { path, contents } => std::fs::write(path, contents)
                .with_context(|| format!("writing {}", path.display())),
            Step::RemoveFile(path) => match std::fs::remove_file(path) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    Err(error).with_context(|| format!("removing {}", path.display()))
                }
                _ => Ok(()),
            },
            Step::Run { argv, may_fail } => run(argv, *may_fail),
        }
    }
}

fn run(argv: &[String], may_fail: bool) -> Result<()> {
    let line = shell_line(argv);
    let (program, args) = argv
        .split_first()
        .context("a service step has an empty command")?;
    let mut command = Command::new(program);
    command.args(args);
    if may_fail {
        command.stdout(Stdio::null()).stderr(Stdio::null());
    }
    let status = command
        .status()
        .with_context(|| format!("running `{line}`"))?;
    if status.success() {
        Ok(())
    } else if may_fail {
        tracing::info!(command = %line, %status, "failed, as it may: nothing to undo");
        Ok(())
    } else {
        bail!("`{line}` failed: {status}")
    }
}

/// The plan as shell commands: a file's contents appear in a here-document.
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for step in &self.steps {
            match step {
                Step::CreateDir(path) => {
                    writeln!(f, "mkdir -p {}", quote(&path.to_string_lossy()))?
                }
                Step::WriteFile { path, contents } => {
                    writeln!(f, "cat > {} <<'EOF'", quote(&path.to_string_lossy()))?;
                    write!(f, "{contents}")?;
                    if !contents.ends_with('\n') {
                        writeln!(f)?;
                    }
                    writeln!(f, "EOF")?;
                }
                Step::RemoveFile(path) => writeln!(f, "rm -f {}", quote(&path.to_string_lossy()))?,
                Step::Run { argv, may_fail } => {
                    let suffix = if *may_fail { " || true" } else { "" };
                    writeln!(f, "{}{suffix}", shell_line(argv))?;
                }
            }
        }
        Ok(())
    }
}

fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|arg| quote(arg))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `arg` as one shell word: as is when it holds no special characters, else single-quoted.
fn quote(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:@%+=,".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_with_spaces_or_quotes_are_single_quoted() {
        assert_eq!(
            quote("gui/501/com.corral.server"),
            "gui/501/com.corral.server"
        );
        assert_eq!(quote("/Users/a b/corral"), "'/Users/a b/corral'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn a_plan_prints_as_shell_commands() {
        let plan = Plan {
            steps: vec![
                Step::CreateDir("/h/dir".into()),
                Step::WriteFile {
                    path: "/h/dir/unit".into(),
                    contents: "a = 1\n".into(),
                },
                Step::run_may_fail(&["svc", "unload"]),
                Step::run(&["svc", "load", "/h/dir/unit"]),
                Step::RemoveFile("/h/old".into()),
            ],
        };
        assert_eq!(
            plan.to_string(),
            "mkdir -p /h/dir\ncat > /h/dir/unit <<'EOF'\na = 1\nEOF\nsvc unload || true\n\
             svc load /h/dir/unit\nrm -f /h/old\n"
        );
        assert_eq!(plan.commands(), ["svc unload", "svc load /h/dir/unit"]);
    }

    #[test]
    fn executing_writes_files_and_tolerates_only_may_fail_commands() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sub/unit");
        let plan = Plan {
            steps: vec![
                Step::CreateDir(dir.path().join("sub")),
                Step::WriteFile {
                    path: file.clone(),
                    contents: "x\n".into(),
                },
                Step::run_may_fail(&["false"]),
            ],
        };
        plan.execute().unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x\n");

        Plan {
            steps: vec![
                Step::RemoveFile(file.clone()),
                Step::RemoveFile(file.clone()),
            ],
        }
        .execute()
        .unwrap();
        assert!(!file.exists());

        let error = Plan {
            steps: vec![Step::run(&["false"])],
        }
        .execute()
        .unwrap_err();
        assert!(error.to_string().contains("`false` failed"), "{error:#}");
    }
}
