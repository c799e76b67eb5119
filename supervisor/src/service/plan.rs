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
mod tests;
