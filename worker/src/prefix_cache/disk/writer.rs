//! The one background writer thread. It takes a job, writes a temp file outside the lock, then
//! under the lock renames it into place (unless `forget` cancelled it meanwhile) and evicts the
//! least recently used files while the directory is over its limit. Eviction happens here,
//! inline, never as queue work, so making room needs no queue slot; and it stops after
//! `max_evictions_per_save` files so one save never turns into a long burst of unlinks (the
//! rest go on the next saves).

use std::fs;
use std::io;
use std::path::Path;
use std::sync::{Arc, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use super::counters;
use super::files;
use super::header::{BlockHeader, BlockKey};
use super::state::{Job, Shared, State};

pub(super) fn spawn(shared: Arc<Shared>) -> io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("prefix-cache-writer".into())
        .spawn(move || {
            while let Some(job) = next_job(&shared) {
                write(&shared, job);
            }
        })
}

fn next_job(shared: &Shared) -> Option<Job> {
    let mut state = shared.lock();
    loop {
        if state.stopping {
            return None;
        }
        if let Some(job) = state.queue.pop_front() {
            state.writing = Some(job.seq);
            drop(state);
            shared.wake_callers();
            return Some(job);
        }
        state = shared.wait_for_work(state);
    }
}

enum Outcome {
    Persisted,
    Dropped,
    Cancelled,
}

fn write(shared: &Shared, job: Job) {
    let temp = files::temp_path(&shared.dir, &job.key);
    // While the disk is full, jobs queued before the pause began are dropped unwritten.
    let admitted = shared.lock().pause.admits(Instant::now());
    let written = admitted.then(|| write_temp(shared, &temp, &job));
    let state = shared.lock();
    #[cfg(test)]
    let state = super::tests::park(shared, state, &job.key);
    let mut state = state;
    let outcome = match written {
        None => Outcome::Dropped,
        Some(Err(error)) => {
            files::remove_quietly(&temp);
            failed(shared, &mut state, &temp, &error);
            Outcome::Dropped
        }
        Some(Ok(_)) if state.cancelled.contains(&job.key) => {
            files::remove_quietly(&temp);
            Outcome::Cancelled
        }
        Some(Ok(size)) => commit(shared, &mut state, &temp, &job.key, size),
    };
    finish(shared, state, &job, outcome);
}

fn write_temp(shared: &Shared, temp: &Path, job: &Job) -> io::Result<u64> {
    #[cfg(test)]
    super::tests::injected_failure(shared)?;
    let header = BlockHeader::new(
        shared.fingerprint,
        job.key,
        shared.shape.clone(),
        &job.payload,
    );
    files::write_temp(temp, &header, &job.payload)
}

/// Renames the temp file into place and makes room, all under the lock.
fn commit(shared: &Shared, state: &mut State, temp: &Path, key: &BlockKey, size: u64) -> Outcome {
    let path = files::block_path(&shared.dir, key);
    if let Err(error) = fs::rename(temp, &path) {
        files::remove_quietly(temp);
        failed(shared, state, &path, &error);
        return Outcome::Dropped;
    }
    state.index.insert(*key, size);
    if state.pause.end() {
        tracing::info!(dir = %shared.dir.display(), "prefix cache: the disk has room again");
    }
    evict(shared, state, key);
    Outcome::Persisted
}

/// Removes least recently used files, never `keep` (the block just written), while the index
/// is over the limit, and at most `max_evictions_per_save` of them.
fn evict(shared: &Shared, state: &mut State, keep: &BlockKey) {
    let mut evicted = 0;
    while state.index.bytes() > shared.limit_bytes
        && evicted < shared.options.max_evictions_per_save
    {
        let Some(victim) = state.index.oldest_except(keep) else {
            break;
        };
        shared.remove_block(state, &victim);
        evicted += 1;
    }
    counters::add(&shared.counters.evictions, evicted as u64);
}

/// A failed write costs the block, never the request. A full disk pauses saves; its first
/// occurrence is the one logged at error level.
fn failed(shared: &Shared, state: &mut State, path: &Path, error: &io::Error) {
    let full = matches!(
        error.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    );
    if !full {
        tracing::warn!(path = %path.display(), %error, "prefix cache: cannot write a block");
        return;
    }
    let pause = shared.options.enospc_pause;
    if state.pause.start(Instant::now(), pause) {
        tracing::error!(path = %path.display(), %error, pause_s = pause.as_secs(),
            "prefix cache: disk full; saves paused");
    } else {
        tracing::warn!(path = %path.display(), "prefix cache: disk still full; saves paused");
    }
}

fn finish(shared: &Shared, mut state: MutexGuard<'_, State>, job: &Job, outcome: Outcome) {
    state.writing = None;
    // A replacement of the same key may be queued behind this write.
    if !state.queue.iter().any(|queued| queued.key == job.key) {
        state.queued_or_writing.remove(&job.key);
    }
    state.cancelled.remove(&job.key);
    match outcome {
        Outcome::Persisted => counters::add(&shared.counters.saves_persisted, 1),
        Outcome::Dropped => shared.count_drop(),
        Outcome::Cancelled => {}
    }
    shared.publish(&state);
    drop(state);
    shared.wake_callers();
}
