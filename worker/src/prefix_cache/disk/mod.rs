//! The SSD tier of the prefix cache: one file per block in a per-model directory, which
//! outlives the worker. Payloads are opaque bytes (the caller serializes the KV arrays), so
//! nothing here touches MLX.
//!
//! Saving must never hold up generation: `save` only queues, on a bounded queue, and drops the
//! block (counted) when the queue stays full for `save_wait`. One writer thread writes each
//! block to a temp file and renames it into place, so a killed worker leaves no partial block
//! under a block's name; it then evicts least recently used files to keep the directory under
//! its limit. Loading checks every header field and the payload's sha256; a file that fails is
//! deleted and never served. A full disk pauses saves for a while and never fails a request.

mod counters;
mod error;
mod files;
mod header;
mod index;
mod pause;
mod state;
#[cfg(test)]
mod tests;
mod writer;

use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use counters::{DiskCounters, DiskCountersSnapshot};
pub use error::DiskError;
pub use files::inspect;
pub use header::{
    BlockHeader, BlockKey, BlockShape, FORMAT_VERSION, Fingerprint, HeaderFault, LayerShape,
};

use index::Index;
use state::{Shared, State};

/// The tier's bounds; the defaults suit a worker, tests shrink them.
#[derive(Debug, Clone)]
pub struct DiskOptions {
    /// Blocks waiting for the writer (at least one).
    pub queue_capacity: usize,
    /// How long `save` waits for a queue slot before dropping the block.
    pub save_wait: Duration,
    /// Files one save may evict; the rest wait for the next saves.
    pub max_evictions_per_save: usize,
    /// How long saves are dropped after the disk was found full.
    pub enospc_pause: Duration,
    /// How long dropping the tier waits for the queue to drain.
    pub shutdown_flush: Duration,
}

impl Default for DiskOptions {
    fn default() -> Self {
        Self {
            queue_capacity: 64,
            save_wait: Duration::from_millis(5),
            max_evictions_per_save: 4,
            enospc_pause: Duration::from_secs(30),
            shutdown_flush: Duration::from_secs(2),
        }
    }
}

/// One model's block files and the writer thread that saves them; dropping it flushes and
/// joins the writer.
pub struct DiskTier {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
}

impl DiskTier {
    /// Opens `dir` (created 0700 if missing) with the default options.
    pub fn open(
        dir: &Path,
        fingerprint: Fingerprint,
        shape: BlockShape,
        limit_bytes: u64,
    ) -> io::Result<Self> {
        Self::open_with(dir, fingerprint, shape, limit_bytes, DiskOptions::default())
    }

    /// Deletes leftover temp files and indexes the block files from their directory entries
    /// (name, size, mtime as recency) without reading payloads; they are checked on load.
    /// A directory over `limit_bytes` shrinks over the next saves.
    pub fn open_with(
        dir: &Path,
        fingerprint: Fingerprint,
        shape: BlockShape,
        limit_bytes: u64,
        options: DiskOptions,
    ) -> io::Result<Self> {
        DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        let (found, discarded) = files::scan(dir)?;
        let mut index = Index::default();
        for block in found {
            index.insert(block.key, block.size);
        }
        let options = DiskOptions {
            queue_capacity: options.queue_capacity.max(1),
            ..options
        };
        let shared = Arc::new(Shared::new(
            dir.to_owned(),
            fingerprint,
            shape,
            limit_bytes,
            options,
            index,
        ));
        counters::add(&shared.counters.load_errors, discarded);
        shared.publish(&shared.lock());
        let writer = writer::spawn(Arc::clone(&shared))?;
        Ok(Self {
            shared,
            writer: Some(writer),
        })
    }

    /// Whether a file for `key` is indexed (no I/O; the file is checked on load).
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.shared.lock().index.contains(key)
    }

    /// The payload of `key`'s block, if its file passes every check; a file that fails is
    /// deleted and counted as a load error.
    pub fn load(&self, key: &BlockKey) -> Option<Vec<u8>> {
        let born = self.shared.lock().index.touch(key)?;
        let path = files::block_path(&self.shared.dir, key);
        let checked = files::read_block(&path).and_then(|(header, payload)| {
            self.check(&path, key, &header)?;
            Ok(payload)
        });
        match checked {
            Ok(payload) => Some(payload),
            Err(error) => {
                let mut state = self.shared.lock();
                // Unless the file was evicted or forgotten while being read, or a newer file
                // took its name: then there is nothing bad to delete.
                if state.index.remove_if_born(key, born) {
                    tracing::warn!(%error, "prefix cache: deleting a bad block");
                    files::remove_quietly(&path);
                    counters::add(&self.shared.counters.load_errors, 1);
                    self.shared.publish(&state);
                }
                None
            }
        }
    }

    fn check(&self, path: &Path, key: &BlockKey, header: &BlockHeader) -> Result<(), DiskError> {
        let field = if header.fingerprint != self.shared.fingerprint {
            "model fingerprint"
        } else if header.key != *key {
            "block key"
        } else if header.shape != self.shared.shape {
            "block shape"
        } else {
            return Ok(());
        };
        Err(DiskError::Mismatch {
            path: path.to_owned(),
            field,
        })
    }

    /// Queues `payload` for the writer. Waits at most `save_wait` for a queue slot, then drops
    /// the block (counted); drops at once while the disk is full. A key already on disk (which
    /// counts as a use) or already queued is skipped.
    pub fn save(&self, key: BlockKey, payload: Arc<Vec<u8>>) {
        let shared = &self.shared;
        let mut state = shared.lock();
        if state.index.touch(&key).is_some() || state.queued_or_writing.contains(&key) {
            return;
        }
        let present =
            |state: &State| state.index.contains(&key) || state.queued_or_writing.contains(&key);
        let Some(state) = shared.queue_slot(state, present) else {
            return;
        };
        shared.enqueue(state, key, payload);
    }

    /// Queues `payload` to take the place of what the tier holds or is writing for `key` (a block
    /// kept again with a recurrent snapshot it lacked). A queued save of it gets the new payload;
    /// otherwise the new one waits for a slot as [`DiskTier::save`] does, and only once it has
    /// one is the old file deleted or the old write cancelled: a dropped replacement leaves the
    /// old block, which still serves its keys and values.
    pub fn replace(&self, key: BlockKey, payload: Arc<Vec<u8>>) {
        let shared = &self.shared;
        let mut state = shared.lock();
        if let Some(job) = state.queue.iter_mut().find(|job| job.key == key) {
            job.payload = payload;
            return;
        }
        let Some(mut state) = shared.queue_slot(state, |_| false) else {
            return;
        };
        shared.remove_block(&mut state, &key);
        if state.queued_or_writing.contains(&key) {
            // The writer holds the old payload; the new one is queued behind it.
            state.cancelled.insert(key);
        }
        shared.enqueue(state, key, payload);
    }

    /// Deletes these blocks. A save of one that is still queued is taken off the queue; one
    /// the writer holds is cancelled, and the writer deletes its temp file instead of renaming
    /// it (it checks under the same lock), so no file reappears afterwards.
    pub fn forget(&self, keys: &[BlockKey]) {
        let shared = &self.shared;
        let mut state = shared.lock();
        for key in keys {
            shared.remove_block(&mut state, key);
            if !state.queued_or_writing.contains(key) {
                continue;
            }
            let queued = state.queue.len();
            state.queue.retain(|job| job.key != *key);
            if state.queue.len() == queued {
                state.cancelled.insert(*key);
            } else {
                state.queued_or_writing.remove(key);
            }
        }
        shared.publish(&state);
        drop(state);
        shared.wake_callers();
    }

    /// Waits until every save enqueued before this call is persisted or dropped, at most
    /// `bound`; returns whether they all were.
    pub fn flush(&self, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        let mut state = self.shared.lock();
        let target = state.next_seq;
        loop {
            if state.settled_before(target) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self.shared.wait_for_progress(state, deadline - now);
        }
    }

    pub fn counters(&self) -> DiskCountersSnapshot {
        self.shared.counters.snapshot()
    }

    /// The live counters, for a reader (the stats loop) that does not hold the tier.
    pub fn counters_handle(&self) -> Arc<DiskCounters> {
        Arc::clone(&self.shared.counters)
    }
}

impl Drop for DiskTier {
    /// Flushes within `shutdown_flush`, drops what is still queued (counted), then stops and
    /// joins the writer, which finishes at most the one block it holds.
    fn drop(&mut self) {
        let shared = &self.shared;
        if !self.flush(shared.options.shutdown_flush) {
            tracing::warn!(dir = %shared.dir.display(), "prefix cache: shutdown before the writer caught up");
        }
        let mut state = shared.lock();
        state.stopping = true;
        for job in std::mem::take(&mut state.queue) {
            state.queued_or_writing.remove(&job.key);
            shared.count_drop();
        }
        shared.publish(&state);
        drop(state);
        shared.wake_writer();
        if let Some(writer) = self.writer.take()
            && writer.join().is_err()
        {
            tracing::error!("prefix cache: the writer thread panicked");
        }
    }
}
