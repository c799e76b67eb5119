//! The families read at scrape time: each model's state, each worker's footprint, restarts, and
//! what its worker reports: its batch's occupancy and queue, and its prefix cache counters. They come in as plain [`ModelSample`]s, so
//! this module knows nothing of the pool or the workers: whoever serves `/metrics` gathers the
//! samples (`admin/scrape.rs`).
//!
//! The scraped families are built fresh for every scrape, so a worker that is gone leaves no
//! stale series behind.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use corral_ipc::PrefixCacheStats;

use super::ModelLabels;

/// Every state `corral_worker_state` reports, named as `/admin/workers` names them.
const STATES: [&str; 5] = ["not_running", "starting", "ready", "stopping", "failed"];

#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct StateLabels {
    model: String,
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct RankLabels {
    model: String,
    rank: u32,
    host: String,
}

/// One rank of a worker group, as a scrape sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RankSample {
    pub rank: u32,
    pub host: String,
    pub footprint: Option<u64>,
}

/// One registered model as a scrape sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSample {
    pub model: String,
    /// One of [`STATES`].
    pub state: &'static str,
    pub restarts: u64,
    /// A live worker's footprint (a starting model at its estimate).
    pub footprint: Option<u64>,
    /// Sequences in the running worker's batch, as it reports them.
    pub active_sequences: Option<u32>,
    /// Requests waiting in the running worker's queue for a slot in its batch.
    pub queued_requests: Option<u32>,
    /// What the running worker reports of its prefix cache.
    pub prefix_cache: Option<PrefixCacheStats>,
    /// A worker group's ranks, rank 0 first; empty for a worker of its own.
    pub ranks: Vec<RankSample>,
}

/// The families read at scrape time, for every sampled model.
pub(super) fn families(samples: &[ModelSample]) -> Registry {
    let states = Family::<StateLabels, Gauge>::default();
    let footprints = Family::<ModelLabels, Gauge<u64, AtomicU64>>::default();
    let restarts = Family::<ModelLabels, Counter>::default();
    let active = Family::<ModelLabels, Gauge>::default();
    let queued = Family::<ModelLabels, Gauge>::default();
    let rank_footprints = Family::<RankLabels, Gauge<u64, AtomicU64>>::default();
    for sample in samples {
        for rank in &sample.ranks {
            let labels = RankLabels {
                model: sample.model.clone(),
                rank: rank.rank,
                host: rank.host.clone(),
            };
            if let Some(bytes) = rank.footprint {
                rank_footprints.get_or_create(&labels).set(bytes);
            }
        }
        for state in STATES {
            let labels = StateLabels {
                model: sample.model.clone(),
                state,
            };
            states
                .get_or_create(&labels)
                .set(i64::from(state == sample.state));
        }
        let labels = ModelLabels {
            model: sample.model.clone(),
        };
        restarts.get_or_create(&labels).inc_by(sample.restarts);
        if let Some(bytes) = sample.footprint {
            footprints.get_or_create(&labels).set(bytes);
        }
        if let Some(sequences) = sample.active_sequences {
            active.get_or_create(&labels).set(i64::from(sequences));
        }
        if let Some(requests) = sample.queued_requests {
            queued.get_or_create(&labels).set(i64::from(requests));
        }
    }
    let mut registry = Registry::default();
    registry.register(
        "corral_worker_state",
        "1 for the state each model's worker is in (not_running, starting, ready, stopping, failed), 0 for the others",
        states,
    );
    registry.register(
        "corral_worker_footprint_bytes",
        "Each live worker's process footprint (RSS on Linux, phys_footprint on macOS); a starting model at its estimate",
        footprints,
    );
    registry.register(
        "corral_worker_rank_footprint_bytes",
        "Each rank of a worker group's process footprint, by model, rank and host (they add up to the group's corral_worker_footprint_bytes)",
        rank_footprints,
    );
    registry.register(
        "corral_worker_restarts",
        "Unexpected worker exits and failed starts, by model",
        restarts,
    );
    registry.register(
        "corral_worker_active_sequences",
        "Sequences in each running worker's batch",
        active,
    );
    registry.register(
        "corral_worker_queued_requests",
        "Requests waiting in each running worker's queue for a slot in its batch",
        queued,
    );
    register_prefix_cache(&mut registry, samples);
    registry
}

type PrefixCounter = (&'static str, &'static str, fn(&PrefixCacheStats) -> u64);

/// The prefix cache counters, as the running worker of each model reports them (they start
/// again from zero with a new worker, which Prometheus reads as a counter reset).
const PREFIX_COUNTERS: [PrefixCounter; 10] = [
    (
        "corral_prefix_cache_hit_blocks",
        "Prompt blocks restored from the prefix cache",
        |s| s.hit_blocks,
    ),
    (
        "corral_prefix_cache_miss_blocks",
        "Whole prompt blocks that had to be prefilled",
        |s| s.miss_blocks,
    ),
    (
        "corral_prefix_cache_hit_tokens",
        "Prompt tokens restored from the prefix cache",
        |s| s.hit_tokens,
    ),
    (
        "corral_prefix_cache_miss_tokens",
        "Prompt tokens prefilled",
        |s| s.miss_tokens,
    ),
    (
        "corral_prefix_cache_ram_evictions",
        "Blocks evicted from the RAM tier",
        |s| s.ram_evictions,
    ),
    (
        "corral_prefix_cache_saves_enqueued",
        "Blocks queued for the SSD writer",
        |s| s.saves_enqueued,
    ),
    (
        "corral_prefix_cache_saves_persisted",
        "Blocks written and renamed into place on SSD",
        |s| s.saves_persisted,
    ),
    (
        "corral_prefix_cache_save_drops",
        "Blocks not saved: the writer's queue stayed full or the disk was full",
        |s| s.save_drops,
    ),
    (
        "corral_prefix_cache_disk_evictions",
        "Block files removed for the directory's size limit",
        |s| s.disk_evictions,
    ),
    (
        "corral_prefix_cache_load_errors",
        "Block files that failed their checks on load and were deleted",
        |s| s.load_errors,
    ),
];

type PrefixGauge = (&'static str, &'static str, fn(&PrefixCacheStats) -> u64);

const PREFIX_GAUGES: [PrefixGauge; 3] = [
    (
        "corral_prefix_cache_ram_bytes",
        "Bytes of blocks in the RAM tier",
        |s| s.ram_bytes,
    ),
    (
        "corral_prefix_cache_disk_bytes",
        "Bytes of block files on SSD",
        |s| s.disk_bytes,
    ),
    (
        "corral_prefix_cache_disk_files",
        "Block files on SSD",
        |s| s.disk_files,
    ),
];

fn register_prefix_cache(registry: &mut Registry, samples: &[ModelSample]) {
    let stats: Vec<(&String, &PrefixCacheStats)> = samples
        .iter()
        .filter_map(|sample| Some((&sample.model, sample.prefix_cache.as_ref()?)))
        .collect();
    let labels = |model: &String| ModelLabels {
        model: model.clone(),
    };
    for (name, help, read) in PREFIX_COUNTERS {
        let family = Family::<ModelLabels, Counter>::default();
        for (model, stats) in &stats {
            family.get_or_create(&labels(model)).inc_by(read(stats));
        }
        registry.register(name, help, family);
    }
    for (name, help, read) in PREFIX_GAUGES {
        let family = Family::<ModelLabels, Gauge<u64, AtomicU64>>::default();
        for (model, stats) in &stats {
            family.get_or_create(&labels(model)).set(read(stats));
        }
        registry.register(name, help, family);
    }
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;
    use super::*;

    fn sample(
        model: &str,
        state: &'static str,
        restarts: u64,
        footprint: Option<u64>,
    ) -> ModelSample {
        ModelSample {
            model: model.to_owned(),
            state,
            restarts,
            footprint,
            active_sequences: None,
            queued_requests: None,
            prefix_cache: None,
            ranks: Vec::new(),
        }
    }

    #[test]
    fn every_model_reports_one_state_its_restarts_and_a_live_workers_footprint() {
        let samples = [
            sample("llama", "ready", 2, Some(1 << 30)),
            sample("qwen3", "not_running", 0, None),
        ];
        let text = Metrics::new().exposition(&samples).unwrap();
        for line in [
            r#"corral_worker_state{model="llama",state="ready"} 1"#,
            r#"corral_worker_state{model="llama",state="not_running"} 0"#,
            r#"corral_worker_state{model="qwen3",state="not_running"} 1"#,
            r#"corral_worker_state{model="qwen3",state="ready"} 0"#,
            r#"corral_worker_restarts_total{model="llama"} 2"#,
            r#"corral_worker_restarts_total{model="qwen3"} 0"#,
            r#"corral_worker_footprint_bytes{model="llama"} 1073741824"#,
        ] {
            assert!(text.lines().any(|got| got == line), "{line} in\n{text}");
        }
        assert!(!text.contains(r#"corral_worker_footprint_bytes{model="qwen3"}"#));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_running_workers_batch_and_queue_are_gauges_and_a_stopped_one_has_none() {
        let samples = [
            ModelSample {
                active_sequences: Some(4),
                queued_requests: Some(2),
                ..sample("llama", "ready", 0, Some(1 << 30))
            },
            ModelSample {
                active_sequences: Some(0),
                queued_requests: Some(0),
                ..sample("idle", "ready", 0, Some(1 << 30))
            },
            sample("qwen3", "not_running", 0, None),
        ];
        let text = Metrics::new().exposition(&samples).unwrap();
        for line in [
            "# HELP corral_worker_active_sequences Sequences in each running worker's batch.",
            "# TYPE corral_worker_active_sequences gauge",
            "# TYPE corral_worker_queued_requests gauge",
            r#"corral_worker_active_sequences{model="llama"} 4"#,
            r#"corral_worker_queued_requests{model="llama"} 2"#,
            r#"corral_worker_active_sequences{model="idle"} 0"#,
            r#"corral_worker_queued_requests{model="idle"} 0"#,
        ] {
            assert!(text.lines().any(|got| got == line), "{line} in\n{text}");
        }
        assert!(!text.contains(r#"corral_worker_active_sequences{model="qwen3"}"#));
        assert!(!text.contains(r#"corral_worker_queued_requests{model="qwen3"}"#));
    }

    #[test]
    fn a_worker_groups_ranks_each_report_their_footprint_by_rank_and_host() {
        let rank = |rank: u32, footprint: u64| RankSample {
            rank,
            host: "localhost".to_owned(),
            footprint: Some(footprint),
        };
        let samples = [ModelSample {
            ranks: vec![rank(0, 300), rank(1, 200)],
            ..sample("grouped", "ready", 0, Some(500))
        }];
        let text = Metrics::new().exposition(&samples).unwrap();
        for line in [
            r#"corral_worker_footprint_bytes{model="grouped"} 500"#,
            r#"corral_worker_rank_footprint_bytes{model="grouped",rank="0",host="localhost"} 300"#,
            r#"corral_worker_rank_footprint_bytes{model="grouped",rank="1",host="localhost"} 200"#,
        ] {
            assert!(text.lines().any(|got| got == line), "{line} in\n{text}");
        }
    }
}
