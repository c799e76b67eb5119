//! Reading the log files back: the last lines across `corral.log` and its rotated files, and
//! following `corral.log` as `tail -F` does, through its rotations. A rotation renames the file
//! the follower has open and creates a new one under the name; the follower finishes the
//! renamed file through its open descriptor, then opens the new one from its start, so no line
//! is skipped or shown twice.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{LOG_FILE, files};

/// The last `count` lines of the logs in `dir`, oldest first, reading older files only as far
/// as needed.
pub fn last_lines(dir: &Path, count: usize) -> Result<Vec<String>> {
    tail(dir, count, None)
}

/// `corral.log` in one directory, followed through its rotations.
pub struct Follower {
    path: PathBuf,
    /// The file being read and its inode; `None` until `corral.log` exists.
    open: Option<(File, u64)>,
}

impl Follower {
    /// Writes the last `count` lines of the logs in `dir` to `out`, and returns a follower that
    /// goes on from just after them.
    pub fn start(dir: &Path, count: usize, out: &mut impl Write) -> Result<Self> {
        let path = dir.join(LOG_FILE);
        let mut follower = Follower { path, open: None };
        follower.reopen()?;
        let current = follower.open.as_mut().map(|(file, inode)| (file, *inode));
        for line in tail(dir, count, current)? {
            writeln!(out, "{line}").context("writing the log")?;
        }
        out.flush().context("writing the log")?;
        Ok(follower)
    }

    /// Copies to `out` what was written since the last call, across any rotations since.
    pub fn poll(&mut self, out: &mut impl Write) -> Result<()> {
        loop {
            if let Some((file, _)) = &mut self.open {
                copy_new(file, out).with_context(|| format!("reading {}", self.path.display()))?;
            }
            let on_disk = match std::fs::metadata(&self.path) {
                Ok(metadata) => metadata,
                // Between a rotation's rename and its new file; or no log yet.
                Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(error) => {
                    return Err(error).with_context(|| format!("reading {}", self.path.display()));
                }
            };
            match &mut self.open {
                Some((file, inode)) if *inode == on_disk.ino() => {
                    // Truncated in place (by hand, or `copytruncate`): start over.
                    let position = file.stream_position().context("reading the log")?;
                    if on_disk.len() < position {
                        file.seek(SeekFrom::Start(0)).context("reading the log")?;
                        continue;
                    }
                    return Ok(());
                }
                // Rotated: lines may have reached the old file after the copy above, and none
                // can reach it once the new one exists, so it is finished now.
                Some((file, _)) => {
                    copy_new(file, out).context("reading the rotated log")?;
                    self.reopen()?;
                }
                None => self.reopen()?,
            }
        }
    }

    fn reopen(&mut self) -> Result<()> {
        self.open = match File::open(&self.path) {
            Ok(file) => {
                let inode = file
                    .metadata()
                    .with_context(|| format!("reading {}", self.path.display()))?
                    .ino();
                Some((file, inode))
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => {
                return Err(error).with_context(|| format!("opening {}", self.path.display()));
            }
        };
        Ok(())
    }
}

fn copy_new(file: &mut File, out: &mut impl Write) -> io::Result<()> {
    io::copy(file, out)?;
    out.flush()
}

/// The last `count` lines, `current` (the open `corral.log`, read to its end) the newest part.
/// A rotated file with `current`'s inode is that same file, renamed since it was opened.
fn tail(dir: &Path, count: usize, current: Option<(&mut File, u64)>) -> Result<Vec<String>> {
    let mut newest_first: Vec<String> = Vec::new();
    let take = |text: &str, lines: &mut Vec<String>| {
        for line in text.lines().rev() {
            if lines.len() == count {
                return;
            }
            lines.push(line.to_owned());
        }
    };
    let skip = current.as_ref().map(|(_, inode)| *inode);
    if let Some((file, _)) = current {
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).context("reading the log")?;
        take(&String::from_utf8_lossy(&bytes), &mut newest_first);
    }
    for path in files(dir)?.iter().rev() {
        if newest_first.len() == count {
            break;
        }
        let metadata =
            std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        let is_current = path.file_name().is_some_and(|name| name == LOG_FILE);
        if (skip.is_some() && (is_current || skip == Some(metadata.ino()))) || metadata.is_dir() {
            continue;
        }
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        take(&String::from_utf8_lossy(&bytes), &mut newest_first);
    }
    newest_first.reverse();
    Ok(newest_first)
}
