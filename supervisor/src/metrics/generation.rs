//! What one generation reports as it goes: it counts in the queue depth from its start until
//! its worker accepts it (or it ends without that), then its prompt tokens, the time to its first
//! generated token, and every generated token as it arrives, so a stream that fails or is
//! cancelled still counts the tokens it cost.

use std::sync::Arc;
use std::time::Instant;

use corral_ipc::{Timings, Usage};
use prometheus_client::metrics::gauge::Gauge;

use super::{Metrics, ModelLabels};
use crate::activity::RequestRecord;

pub struct GenerationMetrics {
    metrics: Arc<Metrics>,
    labels: ModelLabels,
    started: Instant,
    /// The queue depth this generation counts in, until its worker accepts it.
    waiting: Option<Gauge>,
    first_token_seen: bool,
    /// The API request this generation answers, for the dashboard's activity.
    request: Option<Arc<RequestRecord>>,
}

impl GenerationMetrics {
    /// Starts the clock for a generation of `model` (a canonical id) and counts it as waiting.
    pub fn start(metrics: Arc<Metrics>, model: &str) -> Self {
        let labels = ModelLabels {
            model: model.to_owned(),
        };
        let waiting = metrics.queue_depth.get_or_create_owned(&labels);
        waiting.inc();
        let request = RequestRecord::current();
        if let Some(request) = &request {
            request.generating(model);
        }
        Self {
            metrics,
            labels,
            started: Instant::now(),
            waiting: Some(waiting),
            first_token_seen: false,
            request,
        }
    }

    /// The worker accepted the generation and is about to prefill `prompt_tokens`.
    pub fn accepted(&mut self, prompt_tokens: u32) {
        self.stop_waiting();
        self.metrics
            .prompt_tokens
            .get_or_create(&self.labels)
            .inc_by(u64::from(prompt_tokens));
    }

    /// A delta covering `count` generated tokens (possibly none) arrived.
    pub fn tokens(&mut self, count: u32) {
        if count == 0 {
            return;
        }
        if !self.first_token_seen {
            self.first_token_seen = true;
            if let Some(request) = &self.request {
                request.first_token();
            }
            self.metrics
                .time_to_first_token
                .get_or_create(&self.labels)
                .observe(self.started.elapsed().as_secs_f64());
        }
        self.metrics
            .generated_tokens
            .get_or_create(&self.labels)
            .inc_by(u64::from(count));
    }

    /// The generation ended with its worker's `usage` and `timings`: the passes that sampled
    /// its tokens, the tokens guessed ahead and confirmed, and the images its vision tower
    /// encoded and its time on them.
    pub fn finished(&self, usage: &Usage, timings: &Timings) {
        if let Some(request) = &self.request {
            request.generated(usage, timings.decode_ms);
        }
        // Each pass samples one token and confirms none or more guesses after it.
        let steps = usage
            .completion_tokens
            .saturating_sub(usage.accepted_tokens);
        if steps > 0 {
            self.metrics
                .generation_steps
                .get_or_create(&self.labels)
                .inc_by(u64::from(steps));
        }
        if timings.images_encoded > 0 {
            self.metrics
                .images_encoded
                .get_or_create(&self.labels)
                .inc_by(u64::from(timings.images_encoded));
            self.metrics
                .image_encode
                .get_or_create(&self.labels)
                .observe(timings.image_encode_ms as f64 / 1000.0);
        }
        if usage.drafted_tokens > 0 {
            self.metrics
                .drafted_tokens
                .get_or_create(&self.labels)
                .inc_by(u64::from(usage.drafted_tokens));
            self.metrics
                .accepted_tokens
                .get_or_create(&self.labels)
                .inc_by(u64::from(usage.accepted_tokens));
        }
    }

    fn stop_waiting(&mut self) {
        if let Some(waiting) = self.waiting.take() {
            waiting.dec();
        }
    }
}

/// A generation refused, failed or abandoned before its acceptance leaves the queue too.
impl Drop for GenerationMetrics {
    fn drop(&mut self) {
        self.stop_waiting();
    }
}
