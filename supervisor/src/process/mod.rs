//! Real worker processes: where their sockets and pid records live (`run_dir`), how one is
//! spawned and brought to `Ready` (`launcher`), how its exit is noticed (`reaper`), how requests
//! share its one connection (`client`) and how it is stopped (`stop`).
//!
//! The pool (`crate::pool`) only sees this through the `Launcher` trait and `Pool::on_exit`, so
//! its state machine stays testable without processes.

mod client;
mod launcher;
mod reaper;
mod run_dir;
mod stop;

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod launcher_tests;
#[cfg(test)]
mod run_dir_tests;
#[cfg(test)]
mod stop_tests;

pub use client::{ClientError, RequestHandle, STATS_TIMEOUT, WorkerClient};
pub use launcher::{DEFAULT_START_TIMEOUT, ModelLookup, ProcessLauncher, WorkerMemoryLimits};
pub use reaper::{WorkerExit, WorkerProcess};
pub use run_dir::{RunDir, RunDirError, SlotName, WORKER_BINARY_NAME, reap_orphans};
pub use stop::{StopStep, Stopped, kill_now, stop_worker};
