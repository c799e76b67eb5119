//! The dashboard: one page at `/` (and `/ui/`), its script and its style, compiled into the
//! binary so that it works offline and always matches the server that serves it. It holds no
//! data: the page reads the admin API and the APIs with the keys its user gives it, so it is
//! served without a key, with a policy that lets it load nothing from anywhere else.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");

/// Only this server's own script, style, API and the images a user picks for a chat.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data: blob:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

pub fn router() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/index.html", get(index))
        .route("/ui/app.js", get(script))
        .route("/ui/style.css", get(style))
}

async fn index() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // A new corral serves a new page: the browser asks again rather than keep an old one.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_page_is_well_under_its_300_kb() {
        let total = INDEX.len() + SCRIPT.len() + STYLE.len();
        assert!(total < 300_000, "{total} bytes");
    }

    #[tokio::test]
    async fn each_asset_has_its_type_and_a_policy_that_loads_nothing_from_elsewhere() {
        let response = script().await;
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
        let policy = response.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"));
    }
}
