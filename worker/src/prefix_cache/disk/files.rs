//! The block files on disk: their names, the scan at start, the write of a temp file and the
//! checked read. `<key hex>.kvb` is a complete block; `<key hex>.<pid>-<n>.tmp` is a write in
//! progress, renamed into place only once complete, so a killed writer leaves at most a temp
//! file, which the next start deletes.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use super::error::DiskError;
use super::header::{BlockHeader, BlockKey, FIXED_LEN, checksum};

const BLOCK_EXT: &str = "kvb";
const TEMP_EXT: &str = "tmp";

pub(super) fn block_path(dir: &Path, key: &BlockKey) -> PathBuf {
    dir.join(format!("{}.{BLOCK_EXT}", hex(key)))
}

/// A temp name no other write uses: the pid tells processes apart, the serial writes.
pub(super) fn temp_path(dir: &Path, key: &BlockKey) -> PathBuf {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    dir.join(format!("{}.{pid}-{serial}.{TEMP_EXT}", hex(key)))
}

fn hex(key: &BlockKey) -> String {
    key.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn parse_key(hex: &str) -> Option<BlockKey> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut key = [0; 32];
    for (byte, pair) in key.iter_mut().zip(hex.as_bytes().chunks(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(key)
}

/// A block file found at start, from its directory entry alone.
pub(super) struct Found {
    pub key: BlockKey,
    pub size: u64,
    pub modified: SystemTime,
}

/// The block files in `dir`, oldest first, and how many bad ones were deleted. Temp files
/// (writes a killed worker never finished) and files too short to hold a header are deleted;
/// payloads are not read, so a start costs one `stat` per file.
pub(super) fn scan(dir: &Path) -> io::Result<(Vec<Found>, u64)> {
    let mut found = Vec::new();
    let mut discarded = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
            continue;
        };
        if name.ends_with(&format!(".{TEMP_EXT}")) {
            remove_quietly(&path);
            continue;
        }
        let Some(key) = name
            .strip_suffix(&format!(".{BLOCK_EXT}"))
            .and_then(parse_key)
        else {
            continue;
        };
        // A file deleted between listing and stat is simply not there any more.
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        if metadata.len() < FIXED_LEN as u64 {
            remove_quietly(&path);
            discarded += 1;
            continue;
        }
        found.push(Found {
            key,
            size: metadata.len(),
            modified: metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        });
    }
    found.sort_by_key(|block| block.modified);
    Ok((found, discarded))
}

/// Writes header and payload to a new file at `path`. No fsync: a killed process loses
/// nothing the kernel already holds. A power loss can still leave a renamed file whose data
/// never reached the disk; the checksum catches that on load.
pub(super) fn write_temp(path: &Path, header: &BlockHeader, payload: &[u8]) -> io::Result<u64> {
    let mut file = File::create_new(path)?;
    let header = header.encode();
    file.write_all(&header)?;
    file.write_all(payload)?;
    Ok((header.len() + payload.len()) as u64)
}

/// Reads the file at `path` and checks its header, length and checksum (not which model or
/// block it is for: that is the caller's to compare).
pub(super) fn read_block(path: &Path) -> Result<(BlockHeader, Vec<u8>), DiskError> {
    let io_error = |source| DiskError::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(io_error)?;
    let file_len = file.metadata().map_err(io_error)?.len();
    let header_fault = |fault| DiskError::Header {
        path: path.to_owned(),
        fault,
    };
    let mut head = vec![0; FIXED_LEN];
    file.read_exact(&mut head).map_err(io_error)?;
    head.resize(BlockHeader::len_from_fixed(&head).map_err(header_fault)?, 0);
    file.read_exact(&mut head[FIXED_LEN..]).map_err(io_error)?;
    let header = BlockHeader::decode(&head).map_err(header_fault)?;
    // Checked before allocating, so a corrupt length cannot ask for a huge buffer.
    let actual = file_len.saturating_sub(head.len() as u64);
    if header.payload_len != actual {
        return Err(DiskError::Length {
            path: path.to_owned(),
            expected: header.payload_len,
            actual,
        });
    }
    let mut payload = Vec::with_capacity(actual as usize);
    file.read_to_end(&mut payload).map_err(io_error)?;
    if payload.len() as u64 != actual || checksum(&payload) != header.checksum {
        return Err(DiskError::Checksum {
            path: path.to_owned(),
        });
    }
    Ok((header, payload))
}

/// Validates one block file without an index: its header, length, checksum, and that its name
/// is its key.
pub fn inspect(path: &Path) -> Result<BlockHeader, DiskError> {
    let (header, _) = read_block(path)?;
    let named = path
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.strip_suffix(&format!(".{BLOCK_EXT}")))
        .and_then(parse_key);
    if named != Some(header.key) {
        return Err(DiskError::Mismatch {
            path: path.to_owned(),
            field: "file name",
        });
    }
    Ok(header)
}

/// Deletes `path`; a file already gone is fine, any other failure is only logged because a
/// stray file costs disk space, never correctness (it is checked again on load).
pub(super) fn remove_quietly(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "prefix cache: cannot delete a block file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_round_trip() {
        let key: BlockKey = std::array::from_fn(|i| (i * 7) as u8);
        let path = block_path(Path::new("/d"), &key);
        let stem = path.file_stem().unwrap().to_str().unwrap();
        assert_eq!(parse_key(stem), Some(key));
        assert_eq!(parse_key("zz"), None);
        assert_eq!(parse_key(&"g".repeat(64)), None);
    }
}
