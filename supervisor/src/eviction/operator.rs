//! Stops an operator asks for: unloading a model once its requests are done, and killing a
//! worker at once. Both are recorded in the ledger like evictions, under their own reasons.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{EvictionRecord, MemoryManager, StopStarted, footprint};
use crate::pool::{Launcher, Phase, StopReason};
use crate::process::{StopStep, WorkerClient};

/// How often an unload looks again while the worker still serves.
const DRAIN_POLL: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("model {model} has no running worker")]
    NotRunning { model: String },
    #[error("model {model} still had requests in flight after {} s", .after.as_secs_f64())]
    DrainTimeout { model: String, after: Duration },
}

impl<L: Launcher<Handle = Arc<WorkerClient>>> MemoryManager<L> {
    /// Waits up to `timeout` for `model`'s requests to end (new ones may still arrive and are
    /// waited for too), then stops the worker gracefully and waits for the reap.
    pub async fn unload(
        &self,
        model: &str,
        reason: StopReason,
        timeout: Duration,
    ) -> Result<EvictionRecord, OperatorError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(record) = self.evict(model, reason).await {
                return Ok(record);
            }
            match self.pool.phase(model) {
                Phase::NotRunning | Phase::Failed => {
                    return Err(OperatorError::NotRunning {
                        model: model.to_owned(),
                    });
                }
                Phase::Ready | Phase::Starting | Phase::Stopping(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(OperatorError::DrainTimeout {
                    model: model.to_owned(),
                    after: timeout,
                });
            }
            tokio::time::sleep(DRAIN_POLL).await;
        }
    }

    /// Sends `signal` to `model`'s worker now, whether or not it serves (its requests fail with
    /// its exit), and waits for the reap; a worker still alive a grace period after a softer
    /// signal gets SIGKILL.
    pub async fn kill(&self, model: &str, signal: Signal) -> Result<EvictionRecord, OperatorError> {
        let started = StopStarted::now();
        let worker = self
            .pool
            .begin_kill(model)
            .ok_or_else(|| OperatorError::NotRunning {
                model: model.to_owned(),
            })?;
        let footprint_before = footprint(worker.pid);
        let process = worker.handle.process();
        tracing::warn!(model, pid = worker.pid, %signal, "killing a worker on request");
        process.signal(signal);
        let step = if signal == Signal::SIGKILL {
            process.wait().await;
            StopStep::Killed
        } else if tokio::time::timeout(self.config.worker_stop_grace, process.wait())
            .await
            .is_ok()
        {
            StopStep::Terminated
        } else {
            process.signal(Signal::SIGKILL);
            process.wait().await;
            StopStep::Killed
        };
        Ok(self.remember(started.finish(
            model,
            worker.pid,
            StopReason::Killed,
            step,
            footprint_before,
        )))
    }
}
