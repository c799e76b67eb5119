//! The RAII lease on a ready worker.
//!
//! A lease is only made from a count the pool took under its lock on a `Ready` entry, and its
//! `Drop` gives that count back under the same lock, on every path out of a request: normal end,
//! error, cancellation (the future is dropped) and panic (unwinding drops it). It names the
//! worker's generation, so a lease that outlives its worker (a crash, then a restart) cannot
//! lower the count of the worker that replaced it.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::machine::{PoolState, lock};
use super::state::Worker;

pub struct Lease<H> {
    state: Arc<Mutex<PoolState<H>>>,
    model: String,
    worker: Worker<H>,
    completed: bool,
}

impl<H> Lease<H> {
    /// Wraps a count `PoolState::acquire` has just taken on `worker`.
    pub(super) fn new(state: Arc<Mutex<PoolState<H>>>, model: &str, worker: Worker<H>) -> Self {
        Self {
            state,
            model: model.to_owned(),
            worker,
            completed: false,
        }
    }

    /// Ends the lease after its request ran to its end on this worker: the worker has shown it
    /// can serve, which ends the model's crash-loop streak (see `state.rs`).
    pub fn complete(mut self) {
        self.completed = true;
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn pid(&self) -> u32 {
        self.worker.pid
    }

    pub fn generation(&self) -> u64 {
        self.worker.generation
    }

    /// The worker's handle (its connection, with real processes).
    pub fn handle(&self) -> &H {
        &self.worker.handle
    }
}

impl<H> Drop for Lease<H> {
    fn drop(&mut self) {
        lock(&self.state).release(
            &self.model,
            self.worker.generation,
            self.completed,
            Instant::now(),
        );
    }
}

impl<H> fmt::Debug for Lease<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("model", &self.model)
            .field("pid", &self.worker.pid)
            .field("generation", &self.worker.generation)
            .finish_non_exhaustive()
    }
}
