//! Optional API keys: `Authorization: Bearer KEY` or `x-api-key: KEY` (what OpenAI and
//! Anthropic clients send). With API keys configured, every route but `/health` needs one; with
//! an admin key configured, the operator routes need that key instead. Without keys the server
//! refuses to listen beyond loopback unless the operator opts in (`serve.rs`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone, Default)]
pub struct Keys {
    pub api_keys: Vec<String>,
    pub admin_key: Option<String>,
}

impl Keys {
    pub fn is_empty(&self) -> bool {
        self.api_keys.is_empty() && self.admin_key.is_none()
    }

    /// Which keys `path` accepts; `None` when it is open.
    fn accepted_for(&self, path: &str) -> Option<Vec<&str>> {
        if path == "/health" {
            return None;
        }
        let api = self.api_keys.iter().map(String::as_str);
        let keys: Vec<&str> = match (&self.admin_key, is_operator_route(path)) {
            (Some(admin), true) => vec![admin.as_str()],
            (Some(admin), false) => api.chain([admin.as_str()]).collect(),
            (None, _) => api.collect(),
        };
        // Only an admin key configured: the OpenAI routes stay open.
        if keys.is_empty() || (self.api_keys.is_empty() && !is_operator_route(path)) {
            return None;
        }
        Some(keys)
    }
}

/// The routes that act on workers or expose the server's internals.
fn is_operator_route(path: &str) -> bool {
    path.starts_with("/admin/")
        || path == "/metrics"
        || path == "/v1/models/status"
        || (path.starts_with("/v1/models/")
            && (path.ends_with("/load") || path.ends_with("/unload")))
}

pub async fn require_key(State(keys): State<Arc<Keys>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let Some(accepted) = keys.accepted_for(path) else {
        return next.run(request).await;
    };
    let anthropic = crate::api::is_anthropic_route(path);
    match presented_key(request.headers()) {
        Some(key) if accepted.iter().any(|accepted| same(accepted, key)) => next.run(request).await,
        Some(_) => unauthorized("the API key is not valid for this route", anthropic),
        None => unauthorized(
            "an API key is required: send `Authorization: Bearer <key>` or `x-api-key: <key>`",
            anthropic,
        ),
    }
}

fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let value = value.to_str().ok()?;
        return value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .map(str::trim);
    }
    headers.get("x-api-key")?.to_str().ok().map(str::trim)
}

fn same(expected: &str, given: &str) -> bool {
    corral_ipc::tokens_match(given.as_bytes(), expected.as_bytes())
}

/// In the shape of the API asked: Anthropic's SDKs read `error.type`, OpenAI's `error.code`.
fn unauthorized(message: &str, anthropic: bool) -> Response {
    let body = if anthropic {
        json!({"type": "error", "error": {"type": "authentication_error", "message": message}})
    } else {
        json!({"error": {
            "message": message, "type": "invalid_request_error", "code": "invalid_api_key",
            "param": null,
        }})
    };
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(api: &[&str], admin: Option<&str>) -> Keys {
        Keys {
            api_keys: api.iter().map(|key| (*key).to_owned()).collect(),
            admin_key: admin.map(str::to_owned),
        }
    }

    #[test]
    fn health_is_always_open_and_no_keys_means_open() {
        assert_eq!(keys(&["k"], Some("a")).accepted_for("/health"), None);
        assert_eq!(keys(&[], None).accepted_for("/v1/chat/completions"), None);
        assert_eq!(keys(&[], None).accepted_for("/admin/workers"), None);
    }

    #[test]
    fn the_admin_key_alone_guards_operator_routes_and_opens_the_rest() {
        let keys = keys(&["k"], Some("a"));
        assert_eq!(keys.accepted_for("/admin/workers"), Some(vec!["a"]));
        assert_eq!(
            keys.accepted_for("/v1/models/org/x/unload"),
            Some(vec!["a"])
        );
        assert_eq!(keys.accepted_for("/metrics"), Some(vec!["a"]));
        assert_eq!(keys.accepted_for("/v1/completions"), Some(vec!["k", "a"]));
        let admin_only = super::tests::keys(&[], Some("a"));
        assert_eq!(admin_only.accepted_for("/v1/completions"), None);
        assert_eq!(admin_only.accepted_for("/admin/memory"), Some(vec!["a"]));
    }

    #[test]
    fn without_an_admin_key_api_keys_guard_everything() {
        let keys = keys(&["k1", "k2"], None);
        assert_eq!(keys.accepted_for("/admin/workers"), Some(vec!["k1", "k2"]));
        assert_eq!(keys.accepted_for("/v1/models"), Some(vec!["k1", "k2"]));
    }

    #[tokio::test]
    async fn a_refused_anthropic_request_gets_anthropics_error_shape() {
        let response = unauthorized("no key", true);
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            json!({"type": "error", "error": {"type": "authentication_error", "message": "no key"}})
        );
    }

    #[test]
    fn keys_come_from_bearer_or_x_api_key() {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("k"));
        assert_eq!(presented_key(&headers), Some("k"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer b"));
        assert_eq!(presented_key(&headers), Some("b"));
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
    }
}
