//! `GET /metrics`: the recorded families plus those sampled now from the pool (each model's
//! state, footprint and restarts) and from each ready worker (its batch, its queue and its prefix
//! cache counters), in the OpenMetrics text format, which Prometheus asks for first and parses as
//! its own text format.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::Admin;
use crate::metrics::{ModelSample, RankSample};
use crate::pool::Phase;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub async fn show(State(admin): State<Arc<Admin>>) -> Response {
    let snapshot = admin.pool.snapshot();
    let usage = admin.pool.usage();
    let mut samples = Vec::new();
    for entry in admin.registry.current().entries() {
        let pool_entry = snapshot
            .iter()
            .find(|pool_entry| pool_entry.model == entry.id);
        let worker = admin.pool.ready_worker(&entry.id);
        let ranks = worker.as_ref().map_or_else(Vec::new, |worker| {
            worker
                .handle
                .ranks()
                .iter()
                .map(|rank| RankSample {
                    rank: rank.rank as u32,
                    host: rank.host.clone(),
                    footprint: rank.footprint_bytes(),
                })
                .collect()
        });
        let stats = match worker {
            Some(worker) => worker.handle.stats().await.ok(),
            None => None,
        };
        samples.push(ModelSample {
            model: entry.id.clone(),
            state: pool_entry
                .map_or(Phase::NotRunning, |pool_entry| pool_entry.phase)
                .name(),
            restarts: pool_entry.map_or(0, |pool_entry| pool_entry.restarts),
            footprint: usage
                .iter()
                .find(|worker| worker.model == entry.id)
                .map(|worker| worker.bytes),
            active_sequences: stats.as_ref().map(|stats| stats.active_sequences),
            queued_requests: stats.as_ref().map(|stats| stats.queued_requests),
            prefix_cache: stats.and_then(|stats| stats.prefix_cache),
            ranks,
        });
    }
    match admin.metrics.exposition(&samples) {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot encode the metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
