//! The middleware that counts every HTTP request by route, model and status, and times it until
//! its response body has ended: for a stream, that is its last event (or the client leaving).
//!
//! The route is the router's template (`/v1/models/{model}`), or `unmatched`, so a client cannot
//! grow the label set by inventing paths; the model is what the handler attached as
//! [`ServedModel`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};

use axum::response::IntoResponse;

use super::{Metrics, UNKNOWN_MODEL};
use crate::activity::RequestRecord;

/// Which model a response answered for, attached to its extensions by the handler: the canonical
/// id, or `None` when the requested name is no model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedModel(pub Option<String>);

impl ServedModel {
    pub fn attach(self, response: impl IntoResponse) -> Response {
        let mut response = response.into_response();
        response.extensions_mut().insert(self);
        response
    }
}

/// The route label of a request no route matched.
const UNMATCHED: &str = "unmatched";

/// For `axum::middleware::from_fn_with_state`, applied with `Router::layer` so that the matched
/// route is known.
pub async fn track_requests(
    State(metrics): State<Arc<Metrics>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    // One line per request when debugging (RUST_LOG=corral::metrics=debug).
    tracing::debug!(method = %request.method(), uri = %request.uri(), "request");
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
        .to_owned();
    let client = request
        .headers()
        .get(axum::http::header::USER_AGENT)
        .and_then(|agent| agent.to_str().ok());
    let record = metrics.activity.begin(&route, client);
    let response = match &record {
        Some(record) => record.clone().scope(next.run(request)).await,
        None => next.run(request).await,
    };
    let model = match response.extensions().get::<ServedModel>() {
        Some(ServedModel(Some(model))) => model.clone(),
        Some(ServedModel(None)) => UNKNOWN_MODEL.to_owned(),
        None => String::new(),
    };
    let finished = Finished {
        metrics,
        route,
        model,
        status: response.status().as_u16(),
        started,
        record,
    };
    response.map(|body| {
        Body::new(Tracked {
            body,
            finished: Some(finished),
        })
    })
}

/// Records the request when dropped: when its body has ended, or was abandoned.
struct Finished {
    metrics: Arc<Metrics>,
    route: String,
    model: String,
    status: u16,
    started: Instant,
    /// The request in the dashboard's activity, when it is one of the APIs'.
    record: Option<Arc<RequestRecord>>,
}

impl Drop for Finished {
    fn drop(&mut self) {
        self.metrics.record_request(
            &self.route,
            &self.model,
            self.status,
            self.started.elapsed(),
        );
        if let Some(record) = &self.record {
            record.finished(self.status, &self.model);
        }
    }
}

/// A response body that records its request once it has ended. Size hints pass through, so a
/// whole JSON body keeps its `Content-Length`.
struct Tracked {
    body: Body,
    finished: Option<Finished>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(context);
        if let Poll::Ready(None) = polled {
            self.finished = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
