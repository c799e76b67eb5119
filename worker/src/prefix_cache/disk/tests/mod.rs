//! The tier against a real directory: round trips, every way a file can be bad, the start-up
//! scan, and (in `bounds`) the bounds that a naive design would break. The hooks at the top
//! let a test hold the writer between its temp file and its rename, and fake a full disk.

mod bounds;
mod sigkill;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::header::FIXED_LEN;
use super::state::{Shared, State};
use super::*;

/// Called by the writer after writing its temp file: waits there while the gate is closed.
pub(super) fn park<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
    key: &BlockKey,
) -> MutexGuard<'a, State> {
    state.gate.parked = Some(*key);
    shared.wake_callers();
    while state.gate.closed && !state.stopping {
        state = shared.wait_for_work(state);
    }
    state.gate.parked = None;
    state
}

/// Called by the writer before each write: fails it as a full disk would, if a test asked.
pub(super) fn injected_failure(shared: &Shared) -> io::Result<()> {
    let take = |n: u32| n.checked_sub(1);
    match shared
        .fail_writes
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
    {
        Ok(_) => Err(io::ErrorKind::StorageFull.into()),
        Err(_) => Ok(()),
    }
}

impl DiskTier {
    pub(in crate::prefix_cache) fn hold_writer(&self) {
        self.shared.lock().gate.closed = true;
    }

    pub(in crate::prefix_cache) fn release_writer(&self) {
        self.shared.lock().gate.closed = false;
        self.shared.wake_writer();
    }

    /// The key the held writer has written to a temp file and not yet renamed.
    pub(in crate::prefix_cache) fn wait_parked(&self) -> BlockKey {
        let deadline = Instant::now() + SETTLE;
        let mut state = self.shared.lock();
        loop {
            if let Some(key) = state.gate.parked {
                return key;
            }
            assert!(Instant::now() < deadline, "the writer never parked");
            state = self
                .shared
                .wait_for_progress(state, Duration::from_millis(50));
        }
    }
}

const FINGERPRINT: Fingerprint = [7; 32];
/// Two layers of different widths, as Gemma 4's sliding and full-attention layers are.
const LAYERS: [LayerShape; 2] = [
    LayerShape {
        kv_heads: 2,
        key_dim: 8,
        value_dim: 8,
    },
    LayerShape {
        kv_heads: 1,
        key_dim: 16,
        value_dim: 4,
    },
];
const HEADER_LEN: usize = FIXED_LEN + 12 * LAYERS.len();

fn shape() -> BlockShape {
    BlockShape {
        block_tokens: 4,
        dtype: 1,
        recurrent_layers: 0,
        layers: LAYERS.to_vec(),
    }
}

const PAYLOAD_LEN: usize = 1000;
const BLOCK_LEN: u64 = (HEADER_LEN + PAYLOAD_LEN) as u64;
/// How long a test waits for the writer before it calls it a hang: only a guard, since a flush
/// returns as soon as the queue is empty, however busy the machine.
const SETTLE: Duration = Duration::from_secs(300);

fn key(n: u32) -> BlockKey {
    let mut key = [0xab; 32];
    key[..4].copy_from_slice(&n.to_le_bytes());
    key
}

fn payload(n: u32) -> Arc<Vec<u8>> {
    Arc::new((0..PAYLOAD_LEN).map(|i| (i as u32 ^ n) as u8).collect())
}

fn options() -> DiskOptions {
    DiskOptions {
        shutdown_flush: Duration::from_secs(5),
        ..DiskOptions::default()
    }
}

fn open(dir: &Path, limit_bytes: u64) -> DiskTier {
    DiskTier::open_with(dir, FINGERPRINT, shape(), limit_bytes, options()).unwrap()
}

fn save_and_flush(tier: &DiskTier, n: u32) {
    tier.save(key(n), payload(n));
    assert!(tier.flush(SETTLE));
}

fn block_file(dir: &Path, n: u32) -> PathBuf {
    files::block_path(dir, &key(n))
}

/// Every file in `dir` with its size.
fn dir_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (entry.path(), entry.metadata().unwrap().len())
        })
        .collect()
}

fn dir_bytes(dir: &Path) -> u64 {
    dir_files(dir).iter().map(|(_, size)| size).sum()
}

/// Asserts that loading block `n` fails, deletes its file and counts one more load error.
fn assert_rejected(tier: &DiskTier, dir: &Path, n: u32) {
    let errors = tier.counters().load_errors;
    assert!(tier.contains(&key(n)));
    assert_eq!(tier.load(&key(n)), None);
    assert!(!block_file(dir, n).exists());
    assert!(!tier.contains(&key(n)));
    assert_eq!(tier.counters().load_errors, errors + 1);
    assert_eq!(tier.load(&key(n)), None);
    assert_eq!(tier.counters().load_errors, errors + 1);
}

#[test]
fn saved_block_loads_back_identical() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    save_and_flush(&tier, 1);
    assert!(tier.contains(&key(1)));
    assert_eq!(tier.load(&key(1)).as_deref(), Some(payload(1).as_slice()));
    let counters = tier.counters();
    assert_eq!(
        (
            counters.saves_enqueued,
            counters.saves_persisted,
            counters.backlog
        ),
        (1, 1, 0)
    );
    assert_eq!((counters.files, counters.bytes_on_disk), (1, BLOCK_LEN));
    let header = inspect(&block_file(dir.path(), 1)).unwrap();
    assert_eq!((header.key, header.shape), (key(1), shape()));
}

#[test]
fn a_key_already_on_disk_or_queued_is_not_saved_twice() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    tier.hold_writer();
    tier.save(key(1), payload(1));
    tier.save(key(1), payload(1));
    tier.release_writer();
    assert!(tier.flush(SETTLE));
    tier.save(key(1), payload(1));
    assert!(tier.flush(SETTLE));
    assert_eq!(tier.counters().saves_enqueued, 1);
}

#[test]
fn corrupt_payload_byte_is_deleted_and_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    save_and_flush(&tier, 1);
    let path = block_file(dir.path(), 1);
    let mut bytes = fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    fs::write(&path, bytes).unwrap();
    assert!(matches!(inspect(&path), Err(DiskError::Checksum { .. })));
    assert_rejected(&tier, dir.path(), 1);
}

#[test]
fn truncated_block_is_deleted_and_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    save_and_flush(&tier, 1);
    let path = block_file(dir.path(), 1);
    let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(HEADER_LEN as u64 + 10).unwrap();
    assert_rejected(&tier, dir.path(), 1);
}

#[test]
fn block_of_another_model_or_shape_is_deleted_and_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 1 << 20;
    let tier = open(dir.path(), limit);
    for n in 1..=4 {
        save_and_flush(&tier, n);
    }
    drop(tier);

    let other_model = DiskTier::open(dir.path(), [8; 32], shape(), limit).unwrap();
    assert_rejected(&other_model, dir.path(), 1);
    drop(other_model);

    let other_dtype = BlockShape {
        dtype: 2,
        ..shape()
    };
    let other_dtype = DiskTier::open(dir.path(), FINGERPRINT, other_dtype, limit).unwrap();
    assert_rejected(&other_dtype, dir.path(), 2);
    drop(other_dtype);

    // Another layout of the same layers: the second one's head as wide as the first one's.
    let mut other_layers = shape();
    other_layers.layers[1] = LAYERS[0];
    let other_layers = DiskTier::open(dir.path(), FINGERPRINT, other_layers, limit).unwrap();
    assert_rejected(&other_layers, dir.path(), 3);
    drop(other_layers);

    // The same key/value layers beside a recurrent one: its snapshots would not fit.
    let hybrid = BlockShape {
        recurrent_layers: 1,
        ..shape()
    };
    let hybrid = DiskTier::open(dir.path(), FINGERPRINT, hybrid, limit).unwrap();
    assert_rejected(&hybrid, dir.path(), 4);
}

#[test]
fn a_block_of_an_older_format_version_is_deleted_and_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    save_and_flush(&tier, 1);
    drop(tier);
    let path = block_file(dir.path(), 1);
    let mut bytes = fs::read(&path).unwrap();
    bytes[4..8].copy_from_slice(&(super::FORMAT_VERSION - 1).to_le_bytes());
    fs::write(&path, bytes).unwrap();
    let tier = open(dir.path(), 1 << 20);
    assert_rejected(&tier, dir.path(), 1);
}

#[test]
fn block_renamed_to_another_key_is_deleted_and_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    save_and_flush(&tier, 1);
    drop(tier);
    fs::rename(block_file(dir.path(), 1), block_file(dir.path(), 2)).unwrap();
    let tier = open(dir.path(), 1 << 20);
    assert_rejected(&tier, dir.path(), 2);
}

#[test]
fn reopened_tier_indexes_blocks_without_reading_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    for n in 0..5 {
        save_and_flush(&tier, n);
    }
    drop(tier);
    // A corrupt payload goes unnoticed at start, because start reads no payload...
    let path = block_file(dir.path(), 3);
    let mut bytes = fs::read(&path).unwrap();
    bytes[HEADER_LEN] ^= 1;
    fs::write(&path, bytes).unwrap();

    let tier = open(dir.path(), 1 << 20);
    let counters = tier.counters();
    assert_eq!((counters.files, counters.bytes_on_disk), (5, 5 * BLOCK_LEN));
    assert_eq!(counters.load_errors, 0);
    for n in [0, 1, 2, 4] {
        assert_eq!(tier.load(&key(n)).as_deref(), Some(payload(n).as_slice()));
    }
    // ...and is caught on load.
    assert_rejected(&tier, dir.path(), 3);
}

#[test]
fn leftover_temp_files_and_headerless_blocks_are_deleted_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let temp = files::temp_path(dir.path(), &key(1));
    fs::write(&temp, b"half a block").unwrap();
    fs::write(block_file(dir.path(), 2), b"short").unwrap();
    fs::write(dir.path().join("notes.txt"), b"not ours").unwrap();
    let tier = open(dir.path(), 1 << 20);
    assert!(!temp.exists());
    assert!(!block_file(dir.path(), 2).exists());
    assert!(dir.path().join("notes.txt").exists());
    assert_eq!(tier.counters().files, 0);
    assert_eq!(tier.counters().load_errors, 1);
}

#[test]
fn new_directory_is_private_to_its_user() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("model");
    let _tier = open(&dir, 1 << 20);
    let mode = fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn dropping_the_tier_flushes_queued_saves() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path(), 1 << 20);
    for n in 0..10 {
        tier.save(key(n), payload(n));
    }
    drop(tier);
    let tier = open(dir.path(), 1 << 20);
    assert_eq!(tier.counters().files, 10);
}

#[test]
fn flush_gives_up_at_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let tier = Arc::new(open(dir.path(), 1 << 20));
    tier.hold_writer();
    tier.save(key(1), payload(1));
    tier.wait_parked();
    // The writer stays held, so a flush that ignored its bound would never return.
    let (done, flushed) = std::sync::mpsc::channel();
    let flusher = Arc::clone(&tier);
    std::thread::spawn(move || done.send(flusher.flush(Duration::from_millis(50))));
    let flushed = flushed
        .recv_timeout(SETTLE)
        .expect("flush ignored its bound");
    assert!(!flushed);
    tier.release_writer();
    assert!(tier.flush(SETTLE));
}

#[test]
fn full_disk_pauses_saves_without_failing_and_resumes_after_the_pause() {
    let dir = tempfile::tempdir().unwrap();
    // Longer than any stall between the saves below; the pause's end is the test's to choose.
    let options = DiskOptions {
        enospc_pause: SETTLE,
        ..options()
    };
    let tier = DiskTier::open_with(dir.path(), FINGERPRINT, shape(), 1 << 20, options).unwrap();
    tier.shared.fail_writes.store(1, Ordering::SeqCst);
    save_and_flush(&tier, 1);
    save_and_flush(&tier, 2);
    let counters = tier.counters();
    assert_eq!((counters.saves_enqueued, counters.save_drops), (1, 2));
    assert_eq!(counters.saves_persisted, 0);
    assert!(dir_files(dir.path()).is_empty());

    // The pause's length passes (`pause.rs` tests that against the clock).
    assert!(tier.shared.lock().pause.end());
    save_and_flush(&tier, 3);
    assert_eq!(tier.counters().saves_persisted, 1);
    assert!(tier.load(&key(3)).is_some());
}
