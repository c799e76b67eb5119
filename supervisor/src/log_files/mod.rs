//! corral's own log files, for a service with no journal to write to (launchd): `corral.log` in
//! the `[log]` directory, rotated by size to `corral.log.1`, `.2`, ... (the highest the oldest),
//! with at most `keep` files in all. `follow.rs` reads them back for `corral service logs`.
//!
//! Rotation is logroller's: of the crates that rotate by size (tracing-appender only rotates by
//! time), it is the one still maintained, it rotates before a write so a line is never split
//! across two files, and it reports I/O errors instead of panicking or dropping lines. Its
//! renaming and pruning run on a helper thread; `LineWriter` waits for that thread after each
//! line, so the directory never holds more than `keep` files for longer than one rotation.

mod follow;

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use logroller::{LogRoller, LogRollerBuilder, Rotation, RotationSize};

use crate::config::LogConfig;

pub use follow::{Follower, last_lines};

/// The file being written; its rotated predecessors add `.N`.
pub const LOG_FILE: &str = "corral.log";

/// Opens (or creates) `corral.log` in `dir` for appending, rotating as `config` says. The
/// `Mutex` is what tracing's `with_writer` takes: one line at a time, whole.
pub fn open(dir: &Path, config: &LogConfig) -> Result<Mutex<LineWriter>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let roller = LogRollerBuilder::new(dir, Path::new(LOG_FILE))
        .rotation(Rotation::SizeBased(RotationSize::Bytes(config.max_bytes)))
        // logroller's count is of the rotated files; `keep` counts `corral.log` too.
        .max_keep_files(config.keep.saturating_sub(1) as u64)
        // Makes `flush` wait for the rotation's renames and pruning.
        .graceful_shutdown(true)
        .build()
        .with_context(|| format!("opening {}", dir.join(LOG_FILE).display()))?;
    Ok(Mutex::new(LineWriter(roller)))
}

/// Each write is one formatted event, written whole, then flushed: a line is on disk (for
/// `corral service logs -f`) as soon as it is logged, and a rotation it caused is complete.
pub struct LineWriter(LogRoller);

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.0.write(buf)?;
        self.0.flush()?;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// The log files in `dir`, oldest first: the rotated ones by falling number, then any that a
/// rotation cut short left pending (newer than `.1`), then `corral.log`.
pub fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut rotated = Vec::new();
    let mut pending = Vec::new();
    let mut current = None;
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(suffix) = name.strip_prefix(LOG_FILE) else {
            continue;
        };
        if suffix.is_empty() {
            current = Some(entry.path());
        } else if let Some(Ok(n)) = suffix.strip_prefix(".pending.").map(str::parse::<u64>) {
            pending.push((n, entry.path()));
        } else if let Some(Ok(n)) = suffix.strip_prefix('.').map(str::parse::<u64>) {
            rotated.push((n, entry.path()));
        }
    }
    rotated.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    pending.sort();
    Ok(rotated
        .into_iter()
        .chain(pending)
        .map(|(_, path)| path)
        .chain(current)
        .collect())
}

#[cfg(test)]
mod tests;
