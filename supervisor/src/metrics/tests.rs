use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{Request, StatusCode};
use axum::middleware::from_fn_with_state;
use axum::routing::get;
use tower::ServiceExt;

use super::*;

fn text(metrics: &Metrics) -> String {
    metrics.exposition(&[]).unwrap()
}

/// The value of the sample `name{labels}` (labels as encoded), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.parse().unwrap())
}

#[test]
fn a_request_counts_once_by_route_model_and_status_and_is_timed() {
    let metrics = Metrics::new();
    metrics.record_request(
        "/v1/chat/completions",
        "llama",
        200,
        Duration::from_millis(30),
    );
    metrics.record_request("/v1/chat/completions", "llama", 200, Duration::from_secs(3));
    metrics.record_request("/v1/chat/completions", "unknown", 404, Duration::ZERO);
    let text = text(&metrics);
    let ok =
        r#"corral_http_requests_total{route="/v1/chat/completions",model="llama",status="200"}"#;
    assert_eq!(sample(&text, ok), Some(2.0));
    let missing =
        r#"corral_http_requests_total{route="/v1/chat/completions",model="unknown",status="404"}"#;
    assert_eq!(sample(&text, missing), Some(1.0));
    let duration = r#"corral_http_request_duration_seconds_bucket{le="0.05",route="/v1/chat/completions",model="llama"}"#;
    assert_eq!(sample(&text, duration), Some(1.0));
    let count =
        r#"corral_http_request_duration_seconds_count{route="/v1/chat/completions",model="llama"}"#;
    assert_eq!(sample(&text, count), Some(2.0));
}

#[test]
fn a_generation_waits_in_the_queue_until_accepted_then_counts_its_tokens() {
    let metrics = Arc::new(Metrics::new());
    let depth = r#"corral_queue_depth{model="llama"}"#;
    let mut first = GenerationMetrics::start(metrics.clone(), "llama");
    let second = GenerationMetrics::start(metrics.clone(), "llama");
    assert_eq!(sample(&text(&metrics), depth), Some(2.0));
    first.accepted(7);
    drop(second);
    assert_eq!(sample(&text(&metrics), depth), Some(0.0));
    first.tokens(0);
    let ttft = r#"corral_time_to_first_token_seconds_count{model="llama"}"#;
    assert_eq!(sample(&text(&metrics), ttft), None, "no token yet");
    first.tokens(2);
    first.tokens(1);
    drop(first);
    let text = text(&metrics);
    assert_eq!(sample(&text, ttft), Some(1.0));
    let prompt = r#"corral_prompt_tokens_total{model="llama"}"#;
    assert_eq!(sample(&text, prompt), Some(7.0));
    let generated = r#"corral_generated_tokens_total{model="llama"}"#;
    assert_eq!(sample(&text, generated), Some(3.0));
    assert_eq!(
        sample(&text, depth),
        Some(0.0),
        "accepted leaves the queue once"
    );
}

#[test]
fn evictions_count_their_freed_bytes_and_durations_by_reason() {
    let metrics = Metrics::new();
    metrics.record_eviction("idle", 100, Duration::from_millis(20));
    metrics.record_eviction("idle", 50, Duration::from_secs(6));
    metrics.record_eviction("evicted", 7, Duration::from_millis(20));
    let text = text(&metrics);
    assert_eq!(
        sample(&text, r#"corral_evictions_total{reason="idle"}"#),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, r#"corral_evictions_total{reason="evicted"}"#),
        Some(1.0)
    );
    let freed = r#"corral_eviction_freed_bytes_total{reason="idle"}"#;
    assert_eq!(sample(&text, freed), Some(150.0));
    let fast = r#"corral_eviction_duration_seconds_bucket{le="0.025",reason="idle"}"#;
    assert_eq!(sample(&text, fast), Some(1.0));
    let all = r#"corral_eviction_duration_seconds_bucket{le="+Inf",reason="idle"}"#;
    assert_eq!(sample(&text, all), Some(2.0));
}

#[test]
fn worker_exits_are_counted_by_model_and_cause() {
    let metrics = Metrics::new();
    for cause in ["stopped", "signal_9", "exit_code_3"] {
        metrics.record_exit("llama", cause.to_owned());
    }
    let text = text(&metrics);
    for cause in ["stopped", "signal_9", "exit_code_3"] {
        let series = format!(r#"corral_worker_exits_total{{model="llama",cause="{cause}"}}"#);
        assert_eq!(sample(&text, &series), Some(1.0), "{cause} in\n{text}");
    }
}

/// Attaches the model as the API's handlers do: `nope` is no model.
async fn served(Path(name): Path<String>) -> axum::response::Response {
    ServedModel((name != "nope").then_some(name)).attach("done")
}

async fn get_through(app: &Router, path: &str) -> StatusCode {
    let request = Request::get(path).body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    status
}

#[tokio::test]
async fn the_middleware_labels_by_route_template_and_the_handlers_model() {
    let metrics = Arc::new(Metrics::new());
    let app = Router::new()
        .route("/served/{name}", get(served))
        .route("/health", get(|| async { "ok" }))
        .layer(from_fn_with_state(metrics.clone(), track_requests));
    assert_eq!(get_through(&app, "/served/llama").await, StatusCode::OK);
    assert_eq!(get_through(&app, "/served/nope").await, StatusCode::OK);
    assert_eq!(get_through(&app, "/health").await, StatusCode::OK);
    assert_eq!(
        get_through(&app, "/no/such/path").await,
        StatusCode::NOT_FOUND
    );
    let text = text(&metrics);
    for series in [
        r#"corral_http_requests_total{route="/served/{name}",model="llama",status="200"}"#,
        r#"corral_http_requests_total{route="/served/{name}",model="unknown",status="200"}"#,
        r#"corral_http_requests_total{route="/health",model="",status="200"}"#,
        r#"corral_http_requests_total{route="unmatched",model="",status="404"}"#,
    ] {
        assert_eq!(sample(&text, series), Some(1.0), "{series} in\n{text}");
    }
}
