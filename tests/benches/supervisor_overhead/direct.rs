//! The baseline: the bench plays supervisor itself, with the supervisor library's launcher and
//! worker client, and sends its requests straight to each worker's socket.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use corral::pool::{StopOrder, StopReason};
use corral::process::{WorkerClient, stop};
use corral_ipc::FromWorker;
use corral_tests::bench;

use super::{PATIENCE, PROMPT, SIZES, Timed};

/// One worker per fixture, launched and stopped by the library. On a panic, dropping the
/// runtime drops each worker's `Child`, which the launcher spawns with `kill_on_drop`.
pub struct Direct {
    workers: BTreeMap<&'static str, Arc<WorkerClient>>,
    _state: tempfile::TempDir,
}

impl Direct {
    pub async fn launch(models: &Path) -> Self {
        let state = tempfile::tempdir().expect("temporary state directory");
        let launcher = bench::launcher(models, state.path());
        let mut workers = BTreeMap::new();
        for size in SIZES {
            let launched = launcher
                .launch(size.name(), u64::MAX)
                .await
                .unwrap_or_else(|error| panic!("starting a worker: {error}"));
            workers.insert(size.name(), launched.handle);
        }
        Self {
            workers,
            _state: state,
        }
    }

    /// One generation, from sending the request to its `Done` frame.
    pub async fn generate(&self, model: &str, max_tokens: u32) -> Timed {
        let started = Instant::now();
        let mut handle = self.workers[model]
            // What `/v1/completions` sends for `through_corral::completion`'s body.
            .generate(bench::generate_request(PROMPT, max_tokens))
            .await
            .expect("sending a request to the worker");
        let mut first_text = None;
        while let Some(frame) = handle.events.recv().await {
            let now = Instant::now();
            match frame {
                FromWorker::Delta { text, .. } if first_text.is_none() && !text.is_empty() => {
                    first_text = Some(now);
                }
                FromWorker::Done { usage, .. } => {
                    return Timed {
                        total: now - started,
                        decode: now - first_text.expect("the worker streamed no text"),
                        completion_tokens: u64::from(usage.completion_tokens),
                    };
                }
                FromWorker::Rejected { message, .. } | FromWorker::Error { message, .. } => {
                    panic!("the worker failed the request: {message}");
                }
                _ => {}
            }
        }
        panic!("the worker's stream ended without Done");
    }

    pub async fn stop(self) {
        for client in self.workers.values() {
            stop(client, StopOrder::Graceful(StopReason::Shutdown), PATIENCE).await;
        }
    }
}
