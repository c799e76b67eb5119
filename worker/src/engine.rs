//! The engine thread: the one thread that owns all MLX state of this worker.
//!
//! Requests queue on a channel and run one after another, so two computations never overlap on
//! the device, and a cancelled request has finished its last MLX call before the next one starts.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::thread;

use crate::generation::{Event, GenerateError, GenerateRequest, generate};
use crate::loaded::{LoadError, LoadedModel};

/// What the engine tells about a loaded model.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub dir: PathBuf,
    pub weight_bytes: usize,
    pub context_length: usize,
    pub load_time: std::time::Duration,
}

struct Job {
    request: GenerateRequest,
    cancel: Arc<AtomicBool>,
    events: mpsc::Sender<Result<Event, GenerateError>>,
}

pub struct Engine {
    jobs: mpsc::Sender<Job>,
    thread: Option<thread::JoinHandle<()>>,
    pub info: ModelInfo,
}

/// A submitted request: its events, and the flag that cancels it at the next token.
pub struct Submission {
    pub events: mpsc::Receiver<Result<Event, GenerateError>>,
    pub cancel: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("cannot start the engine thread: {0}")]
    Spawn(std::io::Error),
    #[error("the engine thread has stopped")]
    Stopped,
}

impl Engine {
    /// Starts the engine thread and loads the model on it; returns once loading ended.
    pub fn start(model_dir: PathBuf) -> Result<Self, EngineError> {
        let (jobs, job_queue) = mpsc::channel::<Job>();
        let (loaded_tx, loaded_rx) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("engine".into())
            .spawn(move || {
                let loaded = match LoadedModel::load(&model_dir) {
                    Ok(loaded) => loaded,
                    Err(error) => {
                        let _ = loaded_tx.send(Err(error));
                        return;
                    }
                };
                let _ = loaded_tx.send(Ok(ModelInfo {
                    dir: loaded.dir.clone(),
                    weight_bytes: loaded.model.weight_bytes(),
                    context_length: loaded.model.config.max_position_embeddings,
                    load_time: loaded.load_time,
                }));
                run_jobs(&loaded, job_queue);
            })
            .map_err(EngineError::Spawn)?;
        let info = loaded_rx.recv().map_err(|_| EngineError::Stopped)??;
        Ok(Self {
            jobs,
            thread: Some(thread),
            info,
        })
    }

    pub fn submit(&self, request: GenerateRequest) -> Result<Submission, EngineError> {
        let (events, receiver) = mpsc::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        self.jobs
            .send(Job {
                request,
                cancel: cancel.clone(),
                events,
            })
            .map_err(|_| EngineError::Stopped)?;
        Ok(Submission {
            events: receiver,
            cancel,
        })
    }
}

impl Drop for Engine {
    /// Closing the queue ends the thread after the job in hand; joining keeps MLX teardown on it.
    fn drop(&mut self) {
        let (closed, _) = mpsc::channel();
        self.jobs = closed;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run_jobs(loaded: &LoadedModel, jobs: mpsc::Receiver<Job>) {
    for job in jobs {
        let result = generate(loaded, &job.request, &job.cancel, |event| {
            // A requester that went away just stops listening; its cancel flag ends the work.
            let _ = job.events.send(Ok(event));
        });
        if let Err(error) = result {
            let _ = job.events.send(Err(error));
        }
    }
}
