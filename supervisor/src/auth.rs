//! Optional API keys: `Authorization: Bearer KEY` or `x-api-key: KEY` (what OpenAI and
//! Anthropic clients send). With API keys configured, every route but `/health` and the
//! dashboard's page needs one; with an admin key configured, the operations (loading, stopping,
//! pinning, pulling) need that key instead, and the admin key is accepted wherever an API key is.
//! Reading the server's state (`GET /admin/...`, `/metrics`) follows the API keys, so a
//! dashboard without the admin key is read-only. Without keys the server refuses to listen
//! beyond loopback unless the operator opts in (`serve.rs`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
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

    /// Which keys `route` accepts; `None` when it is open.
    fn accepted_for(&self, route: Route) -> Option<Vec<&str>> {
        let api = self.api_keys.iter().map(String::as_str);
        let keys: Vec<&str> = match (route, &self.admin_key) {
            (Route::Open, _) => return None,
            // Only an admin key configured: the APIs and the state stay open.
            (Route::Api, _) if self.api_keys.is_empty() => return None,
            (Route::Api, admin) => api.chain(admin.as_deref()).collect(),
            (Route::Operation, Some(admin)) => vec![admin.as_str()],
            (Route::Operation, None) => api.collect(),
        };
        (!keys.is_empty()).then_some(keys)
    }

    /// Whether `key` may read the server's state and operate it.
    fn access(&self, key: Option<&str>) -> Access {
        let allowed = |route| match self.accepted_for(route) {
            None => true,
            Some(accepted) => {
                key.is_some_and(|key| accepted.iter().any(|accepted| same(accepted, key)))
            }
        };
        Access {
            read: allowed(Route::Api),
            operate: allowed(Route::Operation),
            api_keys: !self.api_keys.is_empty(),
            admin_key: self.admin_key.is_some(),
        }
    }
}

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `/health`, the dashboard's page and `/admin/access`: nothing to read in them.
    Open,
    /// The APIs, and reading the server's state.
    Api,
    /// Acting on workers and models.
    Operation,
}

impl Route {
    fn of(method: &Method, path: &str) -> Self {
        let page = path == "/" || path == "/ui" || path.starts_with("/ui/");
        if path == "/health" || path == "/admin/access" || (page && method == Method::GET) {
            return Self::Open;
        }
        let acts_on_workers = path.starts_with("/admin/")
            || (path.starts_with("/v1/models/")
                && (path.ends_with("/load") || path.ends_with("/unload")));
        if acts_on_workers && method != Method::GET {
            Self::Operation
        } else {
            Self::Api
        }
    }
}

/// `GET /admin/access`: what the key presented may do, for the dashboard to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Access {
    pub read: bool,
    pub operate: bool,
    /// Whether API keys, and an admin key, are configured at all.
    pub api_keys: bool,
    pub admin_key: bool,
}

pub async fn access(State(keys): State<Arc<Keys>>, headers: HeaderMap) -> Json<Access> {
    Json(keys.access(presented_key(&headers)))
}

pub async fn require_key(State(keys): State<Arc<Keys>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let Some(accepted) = keys.accepted_for(Route::of(request.method(), path)) else {
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

    fn get(path: &str) -> Route {
        Route::of(&Method::GET, path)
    }

    fn post(path: &str) -> Route {
        Route::of(&Method::POST, path)
    }

    #[test]
    fn health_and_the_page_are_always_open_and_no_keys_means_open() {
        let guarded = keys(&["k"], Some("a"));
        for path in ["/health", "/", "/ui/app.js", "/admin/access"] {
            assert_eq!(guarded.accepted_for(get(path)), None, "{path}");
        }
        assert_eq!(
            guarded.accepted_for(post("/ui/app.js")),
            Some(vec!["k", "a"])
        );
        let open = keys(&[], None);
        assert_eq!(open.accepted_for(post("/v1/chat/completions")), None);
        assert_eq!(open.accepted_for(get("/admin/workers")), None);
        assert_eq!(open.accepted_for(post("/admin/workers/x/kill")), None);
    }

    #[test]
    fn the_admin_key_alone_guards_operations_and_reading_follows_the_api_keys() {
        let keys = keys(&["k"], Some("a"));
        assert_eq!(
            keys.accepted_for(post("/admin/workers/x/kill")),
            Some(vec!["a"])
        );
        assert_eq!(
            keys.accepted_for(post("/v1/models/org/x/unload")),
            Some(vec!["a"])
        );
        assert_eq!(
            keys.accepted_for(post("/admin/models/pull")),
            Some(vec!["a"])
        );
        assert_eq!(
            keys.accepted_for(get("/admin/workers")),
            Some(vec!["k", "a"])
        );
        assert_eq!(keys.accepted_for(get("/metrics")), Some(vec!["k", "a"]));
        assert_eq!(
            keys.accepted_for(post("/v1/completions")),
            Some(vec!["k", "a"])
        );
        let admin_only = super::tests::keys(&[], Some("a"));
        assert_eq!(admin_only.accepted_for(post("/v1/completions")), None);
        assert_eq!(admin_only.accepted_for(get("/admin/memory")), None);
        assert_eq!(
            admin_only.accepted_for(post("/v1/models/x/load")),
            Some(vec!["a"])
        );
    }

    #[test]
    fn without_an_admin_key_api_keys_guard_everything() {
        let keys = keys(&["k1", "k2"], None);
        assert_eq!(
            keys.accepted_for(get("/admin/workers")),
            Some(vec!["k1", "k2"])
        );
        assert_eq!(
            keys.accepted_for(post("/admin/workers/x/kill")),
            Some(vec!["k1", "k2"])
        );
        assert_eq!(keys.accepted_for(get("/v1/models")), Some(vec!["k1", "k2"]));
    }

    #[test]
    fn access_says_what_a_key_may_do() {
        let keys = keys(&["k"], Some("a"));
        let access = |key| {
            let access = keys.access(key);
            (access.read, access.operate)
        };
        assert_eq!(access(None), (false, false));
        assert_eq!(access(Some("wrong")), (false, false));
        assert_eq!(access(Some("k")), (true, false));
        assert_eq!(access(Some("a")), (true, true));
        let open = super::tests::keys(&[], None).access(None);
        assert!(open.read && open.operate && !open.api_keys && !open.admin_key);
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
