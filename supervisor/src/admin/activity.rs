//! What the dashboard watches: `GET /admin/activity`, the API requests as they start and finish
//! (Server-Sent Events, the last finished ones first); `GET /admin/history`, the last hour's
//! samples for its charts; `GET /admin/logs?lines=N`, the last lines corral logged.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt, stream};
use serde::{Deserialize, Serialize};

use super::Admin;
use crate::activity::{HistoryView, RequestEvent};

/// Lines of the log tail the dashboard asks for at most.
const MAX_LOG_LINES: usize = 2000;

pub async fn activity(
    State(admin): State<Arc<Admin>>,
) -> Sse<impl Stream<Item = Result<Event, axum::Error>>> {
    let mut subscription = admin.metrics.activity.subscribe();
    let recent = std::mem::take(&mut subscription.recent);
    let live = stream::unfold(subscription, |mut subscription| async move {
        let event = subscription.next().await?;
        Some((event, subscription))
    });
    let events = stream::iter(recent).chain(live).map(as_event);
    Sse::new(events).keep_alive(KeepAlive::default())
}

fn as_event(event: RequestEvent) -> Result<Event, axum::Error> {
    Event::default().json_data(event)
}

pub async fn history(State(admin): State<Arc<Admin>>) -> Json<HistoryView> {
    Json(admin.metrics.activity.history())
}

#[derive(Debug, Deserialize)]
pub struct LogParams {
    lines: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct LogTail {
    /// Oldest first.
    pub lines: Vec<String>,
}

pub async fn logs(Query(params): Query<LogParams>) -> Json<LogTail> {
    let count = params.lines.unwrap_or(200).min(MAX_LOG_LINES);
    Json(LogTail {
        lines: crate::log_tail::recent(count),
    })
}
