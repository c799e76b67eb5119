//! What the dashboard watches: `GET /admin/activity`, the API requests as they start and finish
//! (Server-Sent Events, the last finished ones first); `GET /admin/history`, the last hour's
//! samples for its charts; `GET /admin/logs?lines=N`, the last lines corral logged.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt, stream};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use super::Admin;
use crate::activity::{HistoryView, RequestEvent};

/// Lines of the log tail the dashboard asks for at most.
const MAX_LOG_LINES: usize = 2000;

pub async fn activity(
    State(admin): State<Arc<Admin>>,
) -> Sse<impl Stream<Item = Result<Event, axum::Error>>> {
    let (recent, receiver) = admin.metrics.activity.subscribe();
    let live = stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(event) => return Some((event, receiver)),
                // A page too slow to keep up misses some rows, not the stream.
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return None,
            }
        }
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
