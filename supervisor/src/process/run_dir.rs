//! The supervisor's run directory, `<state>/run`: the worker sockets and one pid record per
//! running worker.
//!
//! It is 0700 and owned by us, so nobody else can reach a socket in the moment between `bind`
//! and its chmod to 0600, or plant a record that would make us kill their process. Sockets are
//! named by a [`SlotName`], never by a raw model name, so no model name can point a path outside
//! the directory. The pid records let a supervisor that starts after a SIGKILLed one find and
//! end that run's workers (`reap_orphans`); on Linux workers also die with their parent, but not
//! on macOS, and not a worker whose parent was a wrapper.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, geteuid};
use tokio::net::UnixListener;

/// The file name of the worker binary, which an orphan's executable must have before we kill it.
pub const WORKER_BINARY_NAME: &str = "corral-worker";

/// The longest Unix socket path macOS accepts (`sun_path` is 104 bytes there, 108 on Linux),
/// less its terminating NUL.
const MAX_SOCKET_PATH: usize = 103;

/// How much of a model name a slot keeps, so socket paths stay short.
const SLOT_PREFIX_CHARS: usize = 24;

#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("cannot prepare the run directory {path}: {error}")]
    Io { path: PathBuf, error: io::Error },
    #[error("the run directory {path} is owned by uid {owner}, not by us (uid {us})")]
    ForeignOwner { path: PathBuf, owner: u32, us: u32 },
    #[error("{path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },
    #[error("invalid slot name {name:?}: {reason}")]
    BadSlot { name: String, reason: &'static str },
    #[error("socket path {path} is {len} bytes, over the {MAX_SOCKET_PATH}-byte limit")]
    SocketPathTooLong { path: PathBuf, len: usize },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> RunDirError + '_ {
    move |error| RunDirError::Io {
        path: path.to_owned(),
        error,
    }
}

/// A filesystem-safe name for one model's socket: ASCII letters, digits, `.`, `_` and `-`,
/// not starting with a dot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SlotName(String);

impl SlotName {
    /// A readable prefix of `model` plus a hash of all of it, so two models never share a slot
    /// even when their sanitized prefixes agree.
    pub fn for_model(model: &str) -> SlotName {
        // Dots become `_` as well, so no prefix can form `..` or a hidden file name.
        let prefix: String = model
            .chars()
            .take(SLOT_PREFIX_CHARS)
            .map(|c| if is_slot_char(c) && c != '.' { c } else { '_' })
            .collect();
        SlotName(format!("{prefix}-{:016x}", fnv1a(model.as_bytes())))
    }

    pub fn parse(name: &str) -> Result<SlotName, RunDirError> {
        let bad = |reason| RunDirError::BadSlot {
            name: name.to_owned(),
            reason,
        };
        if name.is_empty() || name.len() > 64 {
            return Err(bad("must be 1 to 64 bytes"));
        }
        if name.starts_with('.') || name.contains("..") {
            return Err(bad("must not start with a dot or contain `..`"));
        }
        if !name.chars().all(is_slot_char) {
            return Err(bad(
                "only ASCII letters, digits, `.`, `_` and `-` are allowed",
            ));
        }
        Ok(SlotName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_slot_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// FNV-1a: stable across Rust releases (unlike `DefaultHasher`), and collisions only need to be
/// unlikely among one host's model names, not hard to forge.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `<state>/run`, checked to be ours and private.
#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    pub fn create(state_dir: &Path) -> Result<RunDir, RunDirError> {
        fs::create_dir_all(state_dir).map_err(io_error(state_dir))?;
        let path = state_dir.join("run");
        private_dir(&path)?;
        private_dir(&path.join("workers"))?;
        Ok(RunDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn socket_path(&self, slot: &SlotName) -> Result<PathBuf, RunDirError> {
        let path = self.path.join(format!("{}.sock", slot.as_str()));
        let len = path.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(RunDirError::SocketPathTooLong { path, len });
        }
        Ok(path)
    }

    /// Listens on `slot`'s socket, replacing a stale socket left by an earlier worker, and
    /// returns the listener with the socket's path. Needs a tokio runtime.
    pub fn bind(&self, slot: &SlotName) -> Result<(UnixListener, PathBuf), RunDirError> {
        let path = self.socket_path(slot)?;
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_socket() => {
                fs::remove_file(&path).map_err(io_error(&path))?;
            }
            Ok(_) => return Err(RunDirError::NotASocket { path }),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(RunDirError::Io { path, error }),
        }
        let listener = UnixListener::bind(&path).map_err(io_error(&path))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).map_err(io_error(&path))?;
        Ok((listener, path))
    }

    fn record_path(&self, pid: u32) -> PathBuf {
        self.path.join("workers").join(pid.to_string())
    }

    /// Notes that `pid` runs `binary`, so a later supervisor can end it if we die first.
    pub fn write_record(&self, pid: u32, binary: &Path, model: &str) -> Result<(), RunDirError> {
        let path = self.record_path(pid);
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let body = format!(
            "binary={}\nstarted_unix={started}\nmodel={model}\n",
            binary.display()
        );
        fs::write(&path, body).map_err(io_error(&path))
    }

    /// Forgets `pid`'s record once it has been reaped. A record already gone is fine.
    pub fn remove_record(&self, pid: u32) -> Result<(), RunDirError> {
        let path = self.record_path(pid);
        match fs::remove_file(&path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => {
                Err(RunDirError::Io { path, error })
            }
            _ => Ok(()),
        }
    }
}

/// Creates `path` as 0700, or checks an existing one is a real directory we own and tightens
/// its mode.
fn private_dir(path: &Path) -> Result<(), RunDirError> {
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(io_error(path)(error)),
    }
    // symlink_metadata, so a symlink planted in place of the directory is refused.
    let meta = fs::symlink_metadata(path).map_err(io_error(path))?;
    if !meta.is_dir() {
        return Err(RunDirError::NotADirectory {
            path: path.to_owned(),
        });
    }
    let us = geteuid().as_raw();
    if meta.uid() != us {
        return Err(RunDirError::ForeignOwner {
            path: path.to_owned(),
            owner: meta.uid(),
            us,
        });
    }
    if meta.mode() & 0o777 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700)).map_err(io_error(path))?;
    }
    Ok(())
}

/// Ends the workers a previous run left behind: for each pid record whose process still runs
/// an executable named `binary_name`, SIGKILL. Every record and every socket in the directory is
/// then removed, since none can belong to a live connection of ours yet. Returns the pids
/// killed. Call it once, at start, before any launch.
pub fn reap_orphans(run_dir: &RunDir, binary_name: &str) -> Vec<u32> {
    let mut killed = Vec::new();
    for (pid, record) in entries(&run_dir.path.join("workers")) {
        if let Some(pid) = pid.to_str().and_then(|pid| pid.parse::<u32>().ok())
            && runs_binary(pid, binary_name)
        {
            match i32::try_from(pid).map(Pid::from_raw) {
                Ok(target) => match kill(target, Signal::SIGKILL) {
                    Ok(()) => {
                        tracing::warn!(pid, "killed a worker left over from a previous run");
                        killed.push(pid);
                    }
                    Err(error) => tracing::warn!(pid, %error, "cannot kill a leftover worker"),
                },
                Err(_) => tracing::warn!(pid, "leftover worker record names an impossible pid"),
            }
        }
        remove_quietly(&record);
    }
    for (_, path) in entries(&run_dir.path) {
        if fs::symlink_metadata(&path).is_ok_and(|meta| meta.file_type().is_socket()) {
            remove_quietly(&path);
        }
    }
    killed
}

fn entries(dir: &Path) -> Vec<(std::ffi::OsString, PathBuf)> {
    match fs::read_dir(dir) {
        Ok(read) => read
            .filter_map(Result::ok)
            .map(|entry| (entry.file_name(), entry.path()))
            .collect(),
        Err(error) => {
            tracing::warn!(path = %dir.display(), %error, "cannot list the run directory");
            Vec::new()
        }
    }
}

fn remove_quietly(path: &Path) {
    if let Err(error) = fs::remove_file(path) {
        tracing::warn!(path = %path.display(), %error, "cannot remove a stale run file");
    }
}

/// Whether `pid` is alive and runs a program named `binary_name`, so a recycled pid that now
/// belongs to something else is left alone.
fn runs_binary(pid: u32, binary_name: &str) -> bool {
    if cfg!(target_os = "linux") {
        proc_names(pid).iter().any(|name| name == binary_name)
    } else {
        ps_name(pid).is_some_and(|name| name == binary_name)
    }
}

/// The executable's file name and the kernel's command name (which is what a multi-call binary
/// such as busybox shows as the program). `comm` is cut at 15 bytes, so `binary_name` must fit.
fn proc_names(pid: u32) -> Vec<String> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let exe = fs::read_link(proc.join("exe")).ok().and_then(|exe| {
        let name = exe.file_name()?.to_string_lossy().into_owned();
        // A binary replaced since the worker started still identifies it.
        Some(name.trim_end_matches(" (deleted)").to_owned())
    });
    let comm = fs::read_to_string(proc.join("comm"))
        .ok()
        .map(|comm| comm.trim_end().to_owned());
    exe.into_iter().chain(comm).collect()
}

/// macOS has no /proc: `kill(pid, 0)` says whether the process exists, `ps` what it runs.
fn ps_name(pid: u32) -> Option<String> {
    kill(Pid::from_raw(i32::try_from(pid).ok()?), None).ok()?;
    let out = std::process::Command::new("ps")
        .args(["-p", &pid.to_string(), "-o", "comm="])
        .output()
        .ok()?;
    let comm = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let name = Path::new(&comm).file_name()?.to_string_lossy().into_owned();
    Some(name)
}
