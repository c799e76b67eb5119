//! What the SSD tier has done, as atomics the serve loop reads without taking the tier's lock.

use std::sync::atomic::{AtomicU64, Ordering};

/// Every save that reaches the queue ends persisted, dropped by the writer (disk full, write
/// error, shutdown) or cancelled by `forget`; until then it counts in `backlog`.
#[derive(Debug, Default)]
pub struct DiskCounters {
    pub(super) saves_enqueued: AtomicU64,
    /// Counted after the rename, when the block can be served.
    pub(super) saves_persisted: AtomicU64,
    /// Saves not persisted for lack of room in the queue, a full disk, a write error or shutdown.
    pub(super) save_drops: AtomicU64,
    pub(super) evictions: AtomicU64,
    pub(super) bytes_on_disk: AtomicU64,
    pub(super) files: AtomicU64,
    /// Loads that found a bad or missing file (and deleted it).
    pub(super) load_errors: AtomicU64,
    /// Saves queued or being written.
    pub(super) backlog: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskCountersSnapshot {
    pub saves_enqueued: u64,
    pub saves_persisted: u64,
    pub save_drops: u64,
    pub evictions: u64,
    pub bytes_on_disk: u64,
    pub files: u64,
    pub load_errors: u64,
    pub backlog: u64,
}

impl DiskCounters {
    pub fn snapshot(&self) -> DiskCountersSnapshot {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        DiskCountersSnapshot {
            saves_enqueued: read(&self.saves_enqueued),
            saves_persisted: read(&self.saves_persisted),
            save_drops: read(&self.save_drops),
            evictions: read(&self.evictions),
            bytes_on_disk: read(&self.bytes_on_disk),
            files: read(&self.files),
            load_errors: read(&self.load_errors),
            backlog: read(&self.backlog),
        }
    }
}

pub(super) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

pub(super) fn set(gauge: &AtomicU64, value: u64) {
    gauge.store(value, Ordering::Relaxed);
}
