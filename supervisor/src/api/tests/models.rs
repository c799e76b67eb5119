//! `GET /v1/models`, `GET /v1/models/{model}` and `GET /health`.

use serde_json::json;

use super::*;

#[tokio::test]
async fn models_and_health_answer() {
    let backend = FakeBackend::replying(hello_world());
    let reply = get(&backend, "/v1/models").await;
    assert_eq!(
        reply.json(),
        json!({"object": "list", "data": [
            {"id": "tiny", "object": "model", "created": 1_700_000_000, "owned_by": "corral",
             "kind": "chat", "vision": false},
            {"id": "embedder", "object": "model", "created": 1_700_000_000, "owned_by": "corral",
             "kind": "embedding", "vision": false},
            {"id": "reranker", "object": "model", "created": 1_700_000_000, "owned_by": "corral",
             "kind": "rerank", "vision": false},
        ]})
    );
    assert_eq!(
        get(&backend, "/v1/models/tiny-alias").await.json()["id"],
        "tiny"
    );
    assert_eq!(
        get(&backend, "/health").await.json(),
        json!({"status": "ok"})
    );
}

/// A backend whose only state is its pinned models, for `/health`.
struct Pinned(Vec<crate::api::PinnedModel>);

impl Backend for Pinned {
    fn models(&self) -> Vec<ModelCard> {
        Vec::new()
    }

    fn resolve(&self, _name: &str) -> Option<String> {
        None
    }

    async fn generate(
        &self,
        model: &str,
        _request: GenerateRequest,
    ) -> Result<GenerationStream, BackendError> {
        Err(BackendError::UnknownModel {
            model: model.to_owned(),
        })
    }

    fn pinned_models(&self) -> Vec<crate::api::PinnedModel> {
        self.0.clone()
    }
}

async fn health(pinned: &[(&str, &'static str, Option<u32>)], path: &str) -> Reply {
    let pinned = pinned
        .iter()
        .map(|&(id, state, pid)| crate::api::PinnedModel {
            id: id.to_owned(),
            state,
            pid,
        })
        .collect();
    let app = crate::api::router(Arc::new(Pinned(pinned)), 16, super::image_fetch(true));
    send(app, Request::get(path).body(Body::empty()).unwrap()).await
}

#[tokio::test]
async fn health_is_ready_only_once_every_pinned_model_is() {
    let ready = health(&[("chat", "ready", Some(41))], "/health").await;
    assert_eq!(ready.status, StatusCode::OK);
    assert_eq!(ready.json(), json!({"status": "ok"}));

    let starting = [("chat", "ready", Some(41)), ("code", "starting", Some(42))];
    let reply = health(&starting, "/health").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.json(), json!({"status": "starting"}));

    let failed = [("chat", "failed", None), ("code", "starting", Some(42))];
    let reply = health(&failed, "/health").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.json(), json!({"status": "unavailable"}));
}

#[tokio::test]
async fn verbose_health_lists_the_pinned_models_states() {
    let pinned = [("chat", "ready", Some(41)), ("code", "not_running", None)];
    let reply = health(&pinned, "/health?verbose=1").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        reply.json(),
        json!({"status": "starting", "pinned": [
            {"id": "chat", "state": "ready", "pid": 41},
            {"id": "code", "state": "not_running"},
        ]})
    );
    let reply = health(&[], "/health?verbose=true").await;
    assert_eq!(reply.json(), json!({"status": "ok", "pinned": []}));
    let reply = health(&[], "/health?verbose=0").await;
    assert_eq!(reply.json(), json!({"status": "ok"}));
}
