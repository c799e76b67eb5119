//! Prometheus metrics: the counters, gauges and histograms the server updates as it works, and
//! the exposition `GET /metrics` serves, which adds the families sampled at scrape time.
//!
//! A leaf: it depends on no other module of the supervisor. Its callers hand it plain labels
//! and samples (`scrape.rs`), so the pool, the processes and the admin API can all feed it
//! without a cycle.
//!
//! One [`Metrics`] (a prometheus-client registry: no global state, so each test gets its own) is
//! shared as `Arc<Metrics>`. Label values stay bounded: a model is a registry id (a name that is
//! no model counts as `unknown`), a route is the router's template, a reason or exit cause comes
//! from a closed set.

mod generation;
mod http;
mod scrape;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::activity::Activity;

pub use generation::GenerationMetrics;
pub use http::{ServedModel, track_requests};
pub use scrape::{ModelSample, RankSample};

/// The `model` label of a request that named a model the registry does not have.
const UNKNOWN_MODEL: &str = "unknown";

/// Seconds, for request durations, times to first token and eviction durations alike: from a
/// few milliseconds (a refused request, a graceful stop) to minutes (a model load, a long stream).
const SECONDS_BUCKETS: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    /// Empty for a request that names no model (`/health`, a body that could not be read).
    model: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
    model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExitLabels {
    model: String,
    /// `stopped` when the supervisor asked for the exit, else `exit_code_N` or `signal_N`.
    cause: String,
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_duration: HistogramFamily<RouteLabels>,
    time_to_first_token: HistogramFamily<ModelLabels>,
    prompt_tokens: Family<ModelLabels, Counter>,
    generated_tokens: Family<ModelLabels, Counter>,
    queue_depth: Family<ModelLabels, Gauge>,
    images_encoded: Family<ModelLabels, Counter>,
    image_encode: HistogramFamily<ModelLabels>,
    drafted_tokens: Family<ModelLabels, Counter>,
    accepted_tokens: Family<ModelLabels, Counter>,
    generation_steps: Family<ModelLabels, Counter>,
    evictions: Family<ReasonLabels, Counter>,
    eviction_freed_bytes: Family<ReasonLabels, Counter>,
    eviction_duration: HistogramFamily<ReasonLabels>,
    worker_exits: Family<ExitLabels, Counter>,
    /// The same requests one by one, for the dashboard.
    pub activity: Arc<Activity>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::default();
        registry.register(
            "corral_http_requests",
            "HTTP requests answered, by route template, model and status",
            requests.clone(),
        );
        let request_duration = seconds_histograms();
        registry.register(
            "corral_http_request_duration_seconds",
            "Time from a request's arrival to the end of its response body (a stream's last event)",
            request_duration.clone(),
        );
        let time_to_first_token = seconds_histograms();
        registry.register(
            "corral_time_to_first_token_seconds",
            "Time from a generation's start (admission, model load and queueing included) to its first generated token",
            time_to_first_token.clone(),
        );
        let prompt_tokens = Family::default();
        registry.register(
            "corral_prompt_tokens",
            "Prompt tokens of the generations workers accepted",
            prompt_tokens.clone(),
        );
        let generated_tokens = Family::default();
        registry.register(
            "corral_generated_tokens",
            "Tokens the workers generated",
            generated_tokens.clone(),
        );
        let queue_depth = Family::default();
        registry.register(
            "corral_queue_depth",
            "Generations waiting for admission, a worker or their turn in the worker",
            queue_depth.clone(),
        );
        let images_encoded = Family::default();
        registry.register(
            "corral_images_encoded",
            "Images the vision towers encoded (not those whose encoding a worker kept from an earlier request)",
            images_encoded.clone(),
        );
        let image_encode = seconds_histograms();
        registry.register(
            "corral_image_encode_seconds",
            "Time the vision tower took on a generation's images, for each generation that had it encode any",
            image_encode.clone(),
        );
        let drafted_tokens = Family::default();
        registry.register(
            "corral_speculative_draft_tokens",
            "Tokens guessed ahead for the model to check (speculative decoding)",
            drafted_tokens.clone(),
        );
        let accepted_tokens = Family::default();
        registry.register(
            "corral_speculative_accepted_tokens",
            "Guessed tokens the model confirmed, each a pass saved; over the draft tokens, the acceptance rate",
            accepted_tokens.clone(),
        );
        let generation_steps = Family::default();
        registry.register(
            "corral_generation_steps",
            "Passes that sampled a generation's tokens (its prompt's last, then each decode pass); generated tokens over these are the tokens per step, above one by the confirmed guesses",
            generation_steps.clone(),
        );
        let evictions = Family::default();
        registry.register(
            "corral_evictions",
            "Workers stopped for memory, idleness, an operator or the shutdown, by reason",
            evictions.clone(),
        );
        let eviction_freed_bytes = Family::default();
        registry.register(
            "corral_eviction_freed_bytes",
            "Footprint of the stopped workers when their stop was decided, by reason",
            eviction_freed_bytes.clone(),
        );
        let eviction_duration = seconds_histograms();
        registry.register(
            "corral_eviction_duration_seconds",
            "Time from an eviction's decision to the reaped worker, by reason",
            eviction_duration.clone(),
        );
        let worker_exits = Family::default();
        registry.register(
            "corral_worker_exits",
            "Worker processes that ended, by model and cause (stopped, exit_code_N, signal_N)",
            worker_exits.clone(),
        );
        Self {
            registry,
            requests,
            request_duration,
            time_to_first_token,
            prompt_tokens,
            generated_tokens,
            queue_depth,
            images_encoded,
            image_encode,
            drafted_tokens,
            accepted_tokens,
            generation_steps,
            evictions,
            eviction_freed_bytes,
            eviction_duration,
            worker_exits,
            activity: Arc::new(Activity::new()),
        }
    }

    /// One answered HTTP request; `elapsed` runs until its body ended.
    pub fn record_request(&self, route: &str, model: &str, status: u16, elapsed: Duration) {
        let labels = RequestLabels {
            route: route.to_owned(),
            model: model.to_owned(),
            status,
        };
        self.requests.get_or_create(&labels).inc();
        let labels = RouteLabels {
            route: labels.route,
            model: labels.model,
        };
        self.request_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// One stopped worker, as the eviction ledger records it.
    pub fn record_eviction(&self, reason: &'static str, freed_bytes: u64, elapsed: Duration) {
        let labels = ReasonLabels { reason };
        self.evictions.get_or_create(&labels).inc();
        self.eviction_freed_bytes
            .get_or_create(&labels)
            .inc_by(freed_bytes);
        self.eviction_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// One reaped worker; `cause` is `stopped` for an exit the pool was waiting for, else its
    /// status (`signal_9`, `exit_code_3`).
    pub fn record_exit(&self, model: &str, cause: String) {
        let labels = ExitLabels {
            model: model.to_owned(),
            cause,
        };
        self.worker_exits.get_or_create(&labels).inc();
    }

    /// The registry's families, then those of `samples` (read at scrape time), as one
    /// OpenMetrics text exposition.
    pub fn exposition(&self, samples: &[ModelSample]) -> Result<String, fmt::Error> {
        let mut text = String::new();
        encode_registry(&mut text, &self.registry)?;
        encode_registry(&mut text, &scrape::families(samples))?;
        encode_eof(&mut text)?;
        Ok(text)
    }
}

fn seconds_histograms<L: Clone + std::hash::Hash + Eq>() -> HistogramFamily<L> {
    Family::new_with_constructor(|| Histogram::new(SECONDS_BUCKETS))
}
