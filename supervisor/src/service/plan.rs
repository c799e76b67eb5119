//! A service action as data: the directories, files and commands it takes, in order. Building the
//! plan touches nothing, so `--dry-run` prints the very steps `execute` would take, and the tests
//! check plans rather than launchd's or systemd's state.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    CreateDir(PathBuf),
    /// A directory a system service writes as its user: the components it creates are given
    /// to that user (root runs the plan), those that exist are left as they are.
    CreateOwnedDir {
        path: PathBuf,
        owner: String,
        group: String,
        uid: u32,
        gid: u32,
    },
    /// Copies an executable to a temporary name beside `to`, then renames it over `to`: a
    /// running process keeps the old file, and nothing ever starts a half-written one.
    InstallBinary {
        from: PathBuf,
        to: PathBuf,
    },
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
            Step::CreateOwnedDir { path, uid, gid, .. } => create_owned_dir(path, *uid, *gid),
            Step::InstallBinary { from, to } => install_binary(from, to),
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

fn create_owned_dir(path: &Path, uid: u32, gid: u32) -> Result<()> {
    let mut missing = Vec::new();
    let mut ancestor = Some(path);
    while let Some(dir) = ancestor.filter(|dir| !dir.exists()) {
        missing.push(dir);
        ancestor = dir.parent();
    }
    for dir in missing.into_iter().rev() {
        std::fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .with_context(|| format!("giving {} to uid {uid}", dir.display()))?;
    }
    Ok(())
}

/// The temporary name `install_binary` writes `to` under first.
fn staging_path(to: &Path) -> PathBuf {
    let name = to
        .file_name()
        .map(|name| name.to_string_lossy())
        .unwrap_or_default();
    to.with_file_name(format!(".{name}.new"))
}

fn install_binary(from: &Path, to: &Path) -> Result<()> {
    let staging = staging_path(to);
    let copy = || -> std::io::Result<()> {
        std::fs::copy(from, &staging)?;
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755))?;
        // On disk before the rename makes it the binary the service starts.
        std::fs::File::open(&staging)?.sync_all()
    };
    copy().with_context(|| format!("copying {} to {}", from.display(), staging.display()))?;
    std::fs::rename(&staging, to)
        .with_context(|| format!("renaming {} to {}", staging.display(), to.display()))
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
                Step::CreateOwnedDir {
                    path, owner, group, ..
                } => writeln!(
                    f,
                    "install -d -o {} -g {} {}",
                    quote(owner),
                    quote(group),
                    quote(&path.to_string_lossy())
                )?,
                Step::InstallBinary { from, to } => {
                    let staging = quote(&staging_path(to).to_string_lossy());
                    let (from, to) = (quote(&from.to_string_lossy()), quote(&to.to_string_lossy()));
                    writeln!(f, "install -m 0755 {from} {staging}")?;
                    writeln!(f, "mv -f {staging} {to}")?;
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
    fn installing_a_binary_replaces_it_atomically_under_a_running_reader() {
        let dir = tempfile::tempdir().unwrap();
        let (built, installed) = (dir.path().join("built"), dir.path().join("bin/corral"));
        std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
        std::fs::write(&built, "new version").unwrap();
        std::fs::write(&installed, "old version").unwrap();
        // What a running service has open: the old file, which the swap must leave whole.
        let mut running = std::fs::File::open(&installed).unwrap();
        let step = Step::InstallBinary {
            from: built.clone(),
            to: installed.clone(),
        };
        Plan {
            steps: vec![step.clone()],
        }
        .execute()
        .unwrap();

        let mut old = String::new();
        std::io::Read::read_to_string(&mut running, &mut old).unwrap();
        assert_eq!(old, "old version");
        assert_eq!(std::fs::read_to_string(&installed).unwrap(), "new version");
        let mode = std::fs::metadata(&installed).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        let left: Vec<_> = std::fs::read_dir(installed.parent().unwrap())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(left, ["corral"], "no staging file is left behind");
        assert_eq!(
            Plan { steps: vec![step] }.to_string(),
            format!(
                "install -m 0755 {0}/built {0}/bin/.corral.new\nmv -f {0}/bin/.corral.new {0}/bin/corral\n",
                dir.path().display()
            )
        );
    }

    #[test]
    fn an_owned_directory_gives_only_the_components_it_creates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b");
        let me = nix::unistd::getuid().as_raw();
        let group = nix::unistd::getgid().as_raw();
        let step = Step::CreateOwnedDir {
            path: path.clone(),
            owner: "ada".into(),
            group: "staff".into(),
            uid: me,
            gid: group,
        };
        let plan = Plan { steps: vec![step] };
        plan.execute().unwrap();
        assert!(path.is_dir());
        plan.execute().unwrap();
        assert_eq!(
            plan.to_string(),
            format!("install -d -o ada -g staff {}\n", path.display())
        );
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
