//! Real worker processes: where their sockets and pid records live (`run_dir`), how one is
//! spawned and brought to `Ready` (`spawn`), how its exit is noticed (`reaper`), how requests
//! share its one connection (`client`), how it is stopped (`stop`, the one stop protocol), what
//! each stop did (`ledger`), and the pool's `Processes` over all of them (`workers`). A worker
//! group's ranks (`group`) may run on other hosts: `remote` is this side of one, `member` the
//! side that runs ranks for another host's group.
//!
//! The pool (`crate::pool`) only sees this through the `Processes` trait and `Pool::on_exit`, so
//! its state machine stays testable without processes.

mod client;
mod group;
mod ledger;
mod member;
mod output;
mod reaper;
mod remote;
mod run_dir;
mod spawn;
mod stop;
mod workers;

#[cfg(test)]
mod tests;

pub use client::{ClientError, Rank, RequestHandle, STATS_TIMEOUT, WorkerClient};
pub use group::GroupPlan;
pub use ledger::{Ledger, RankStopped, StopRecord, StopStarted, StopTotals};
pub use member::{Member, RankRoom, check_flags};
pub use reaper::{WorkerExit, WorkerProcess};
pub use run_dir::{RunDir, RunDirError, SlotName, WORKER_BINARY_NAME, reap_orphans};
pub use spawn::{
    DEFAULT_START_TIMEOUT, ModelArgs, ModelFiles, ModelLookup, ModelRanks, Spawner,
    UnloadableReport,
};
pub use stop::{StopStep, Stopped, stop};
pub use workers::{Described, DescribedSizes, WorkerProcesses};
