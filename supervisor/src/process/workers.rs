//! `WorkerProcesses`: the pool's [`Processes`] for real workers. It launches through the
//! [`Spawner`], stops through the one stop protocol (`stop.rs`) and records every stop in the
//! ledger, measures footprints (RSS on Linux, `phys_footprint` on macOS) and estimates what a
//! model will need from its files.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use corral_ipc::CacheSize;

use super::client::WorkerClient;
use super::ledger::{Ledger, RankStopped, StopRecord, StopStarted};
use super::remote::STOP_CONFIRM;
use super::spawn::{ModelLookup, Spawner};
use super::stop::stop;
use crate::cluster::ClusterConfig;
use crate::memory::{estimate_model_bytes, process_footprint};
use crate::pool::{LaunchError, LaunchedWorker, Processes, StopOrder, Worker};

/// What a model's worker described of its size before any start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedSizes {
    /// The bytes a GGUF's weights take once loaded; `None` for a directory.
    pub gguf_loaded_bytes: Option<u64>,
    /// What its caches take for one sequence.
    pub cache: Option<CacheSize>,
    /// What its vision tower's activations take for one image.
    pub vision_reserve_bytes: u64,
}

/// Model id → what its worker described of its size (nothing for a model not described).
pub type Described = Arc<dyn Fn(&str) -> DescribedSizes + Send + Sync>;

pub struct WorkerProcesses {
    spawner: Spawner,
    /// Where each model's files are, for its estimate.
    lookup: ModelLookup,
    /// What a GGUF's weights become in memory, which its file's size does not tell, and what
    /// a model's caches take, which only the worker reads from its files.
    described: Described,
    /// Each step of a graceful stop waits this long before the next.
    stop_grace: Duration,
    estimates: Mutex<HashMap<String, u64>>,
    ledger: Arc<Mutex<Ledger>>,
    /// Model id → the draft model its worker loads beside it, whose memory is the worker's too.
    drafts: HashMap<String, String>,
    /// A worker group's rank 0 pid → its other ranks on this host, whose memory is the
    /// group's too.
    followers: Arc<Mutex<HashMap<u32, Vec<u32>>>>,
}

impl WorkerProcesses {
    pub fn new(
        spawner: Spawner,
        lookup: ModelLookup,
        described: Described,
        stop_grace: Duration,
        ledger: Arc<Mutex<Ledger>>,
    ) -> Self {
        Self {
            spawner,
            lookup,
            described,
            stop_grace,
            estimates: Mutex::new(HashMap::new()),
            ledger,
            drafts: HashMap::new(),
            followers: Arc::default(),
        }
    }

    /// Counts each model's draft model (model id → draft id) in its worker's estimate.
    pub fn with_drafts(mut self, drafts: HashMap<String, String>) -> Self {
        self.drafts = drafts;
        self
    }

    /// The record of every stop so far.
    pub fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // Plain counters and a list: consistent under any panic point.
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Processes for WorkerProcesses {
    type Handle = Arc<WorkerClient>;
    type Stopped = StopRecord;

    async fn launch(
        &self,
        model: &str,
        memory_limit: u64,
    ) -> Result<LaunchedWorker<Self::Handle>, LaunchError> {
        let launched = self.spawner.launch(model, memory_limit).await?;
        let followers: Vec<u32> = launched
            .handle
            .ranks()
            .iter()
            .filter(|rank| rank.rank != 0 && rank.reported_footprint.is_none())
            .map(|rank| rank.pid)
            .collect();
        if !followers.is_empty() {
            let leader = launched.handle.process().clone();
            lock(&self.followers).insert(leader.pid(), followers);
            let groups = self.followers.clone();
            tokio::spawn(async move {
                leader.wait().await;
                lock(&groups).remove(&leader.pid());
            });
        }
        Ok(launched)
    }

    async fn stop(
        &self,
        model: &str,
        worker: Worker<Self::Handle>,
        order: StopOrder,
    ) -> StopRecord {
        let started = StopStarted::now();
        let footprint_before = self.footprint(worker.pid);
        let ranks: Vec<_> = worker.handle.ranks().iter().skip(1).cloned().collect();
        let rank_footprints: Vec<u64> = ranks
            .iter()
            .map(|rank| rank.footprint_bytes().unwrap_or(0))
            .collect();
        let stopped = stop(&worker.handle, order, self.stop_grace).await;
        // Rank 0 is reaped; each other rank's end is told by its tie, here or by its member,
        // all within one confirmation window.
        let deadline = tokio::time::Instant::now() + STOP_CONFIRM;
        let mut ranks_stopped = Vec::new();
        for (rank, freed_bytes) in ranks.into_iter().zip(rank_footprints) {
            let end = rank.end_by(deadline).await;
            ranks_stopped.push(RankStopped {
                rank: rank.rank,
                host: rank.host,
                pid: rank.pid,
                freed_bytes,
                end,
            });
        }
        let record = started.finish(
            model,
            worker.pid,
            order.reason(),
            stopped.step,
            footprint_before,
            ranks_stopped,
        );
        record.log();
        self.ledger().record(record.clone());
        record
    }

    /// A worker's, or a group's ranks' on this host together.
    fn footprint(&self, pid: u32) -> u64 {
        let followers = lock(&self.followers).get(&pid).cloned().unwrap_or_default();
        std::iter::once(pid)
            .chain(followers)
            .map(|pid| {
                process_footprint(pid).unwrap_or_else(|error| {
                    tracing::debug!(pid, %error, "no footprint");
                    0
                })
            })
            .sum()
    }

    /// The model's and its draft model's: both live in its worker. A group that spans hosts
    /// holds on this host only its ranks' share here.
    fn estimate(&self, model: &str) -> u64 {
        let draft = self.drafts.get(model);
        let whole =
            self.model_estimate(model) + draft.map_or(0, |draft| self.model_estimate(draft));
        let plan = self.spawner.plan(model);
        if !plan.spans_hosts() {
            return whole;
        }
        let here = plan
            .hosts
            .iter()
            .filter(|host| ClusterConfig::is_local(host));
        let share = u128::from(whole) * here.count() as u128 / plan.ranks() as u128;
        u64::try_from(share).unwrap_or(u64::MAX)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WorkerProcesses {
    /// 0 (logged) when the model's files cannot be read, in which case its worker will fail to
    /// load anyway.
    fn model_estimate(&self, model: &str) -> u64 {
        let mut estimates = self
            .estimates
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(&bytes) = estimates.get(model) {
            return bytes;
        }
        let Ok(dir) = (self.lookup)(model) else {
            return 0;
        };
        let described = (self.described)(model);
        match estimate_model_bytes(&dir, described.cache.as_ref()) {
            Ok(mut estimate) => {
                if let Some(bytes) = described.gguf_loaded_bytes {
                    estimate.weight_bytes = bytes;
                }
                estimate.vision_reserve_bytes = described.vision_reserve_bytes;
                estimates.insert(model.to_owned(), estimate.total());
                estimate.total()
            }
            Err(error) => {
                tracing::warn!(model, %error, "cannot estimate the model's memory");
                0
            }
        }
    }
}
