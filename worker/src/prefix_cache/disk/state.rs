//! What callers and the writer thread share, under one lock: the bounded queue, the keys queued
//! or being written, the keys `forget` cancelled mid-write, the index and the disk-full pause.
//! One lock makes "on disk, queued or being written" a single question, and makes `forget` and
//! the writer's rename exclude each other, so a forgotten block never reappears. (A channel
//! would hold the queue but not the rest of this state under the same lock.)

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::DiskOptions;
use super::counters::{self, DiskCounters};
use super::files;
use super::header::{BlockKey, BlockShape, Fingerprint};
use super::index::Index;
use super::pause::Pause;

pub(super) struct Shared {
    pub dir: PathBuf,
    pub fingerprint: Fingerprint,
    pub shape: BlockShape,
    pub limit_bytes: u64,
    pub options: DiskOptions,
    pub counters: Arc<DiskCounters>,
    state: Mutex<State>,
    /// Wakes the writer: a job was queued, or it must stop.
    work: Condvar,
    /// Wakes callers: a queue slot freed or a job finished.
    progress: Condvar,
    /// Test hook: how many coming writes fail as if the disk were full.
    #[cfg(test)]
    pub fail_writes: std::sync::atomic::AtomicU32,
}

pub(super) struct Job {
    pub key: BlockKey,
    pub payload: Arc<Vec<u8>>,
    /// Order of enqueueing, so `flush` can wait for what came before it only.
    pub seq: u64,
}

#[derive(Default)]
pub(super) struct State {
    pub queue: VecDeque<Job>,
    pub queued_or_writing: HashSet<BlockKey>,
    /// The sequence number of the job the writer holds.
    pub writing: Option<u64>,
    /// Keys forgotten while the writer held them: it deletes its temp file instead of renaming.
    pub cancelled: HashSet<BlockKey>,
    pub index: Index,
    pub pause: Pause,
    pub next_seq: u64,
    pub stopping: bool,
    #[cfg(test)]
    pub gate: Gate,
}

/// Test hook: while closed, the writer waits after writing its temp file, before the rename.
#[cfg(test)]
#[derive(Default)]
pub(super) struct Gate {
    pub closed: bool,
    pub parked: Option<BlockKey>,
}

impl Shared {
    pub fn new(
        dir: PathBuf,
        fingerprint: Fingerprint,
        shape: BlockShape,
        limit_bytes: u64,
        options: DiskOptions,
        index: Index,
    ) -> Self {
        Self {
            dir,
            fingerprint,
            shape,
            limit_bytes,
            options,
            counters: Arc::default(),
            state: Mutex::new(State {
                index,
                ..State::default()
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
            #[cfg(test)]
            fail_writes: Default::default(),
        }
    }

    /// The lock; a thread that panicked holding it left the state consistent (every update is
    /// a few assignments), so poisoning is ignored rather than spread.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn wait_for_work<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.work
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn wait_for_progress<'a>(
        &self,
        guard: MutexGuard<'a, State>,
        timeout: Duration,
    ) -> MutexGuard<'a, State> {
        let (guard, _) = self
            .progress
            .wait_timeout(guard, timeout)
            .unwrap_or_else(PoisonError::into_inner);
        guard
    }

    /// Waits at most `save_wait` for a free queue slot and returns the lock holding one; `None`
    /// (the block dropped, counted) while the disk is full or past the wait, and `None`
    /// uncounted once `done` says another save made this one needless.
    pub fn queue_slot<'a>(
        &self,
        mut state: MutexGuard<'a, State>,
        done: impl Fn(&State) -> bool,
    ) -> Option<MutexGuard<'a, State>> {
        let now = Instant::now();
        if !state.pause.admits(now) {
            self.count_drop();
            return None;
        }
        let deadline = now + self.options.save_wait;
        while state.queue.len() >= self.options.queue_capacity {
            let now = Instant::now();
            if now >= deadline {
                self.count_drop();
                return None;
            }
            state = self.wait_for_progress(state, deadline - now);
            if done(&state) {
                return None;
            }
        }
        Some(state)
    }

    /// Queues `payload` under `key` in a slot [`Shared::queue_slot`] found, and wakes the writer.
    pub fn enqueue(&self, mut state: MutexGuard<'_, State>, key: BlockKey, payload: Arc<Vec<u8>>) {
        state.enqueue(key, payload);
        counters::add(&self.counters.saves_enqueued, 1);
        self.publish(&state);
        drop(state);
        self.wake_writer();
    }

    pub fn wake_writer(&self) {
        self.work.notify_all();
    }

    pub fn wake_callers(&self) {
        self.progress.notify_all();
    }

    /// Copies the gauges out of `state`, for readers that do not take the lock.
    pub fn publish(&self, state: &State) {
        counters::set(&self.counters.bytes_on_disk, state.index.bytes());
        counters::set(&self.counters.files, state.index.len() as u64);
        let backlog = state.queue.len() + usize::from(state.writing.is_some());
        counters::set(&self.counters.backlog, backlog as u64);
    }

    pub fn count_drop(&self) {
        counters::add(&self.counters.save_drops, 1);
    }

    /// Deletes `key`'s file under the lock, so no rename of the same key can interleave.
    pub fn remove_block(&self, state: &mut State, key: &BlockKey) {
        if state.index.remove(key) {
            files::remove_quietly(&files::block_path(&self.dir, key));
        }
    }
}

impl State {
    /// Whether every job enqueued before `seq` is persisted or dropped.
    pub fn settled_before(&self, seq: u64) -> bool {
        let queued = self.queue.front().is_none_or(|job| job.seq >= seq);
        queued && self.writing.is_none_or(|writing| writing >= seq)
    }

    pub fn enqueue(&mut self, key: BlockKey, payload: Arc<Vec<u8>>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queued_or_writing.insert(key);
        self.queue.push_back(Job { key, payload, seq });
    }
}
