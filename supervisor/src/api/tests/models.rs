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
            {"id": "tiny", "object": "model", "created": 1_700_000_000, "owned_by": "corral"},
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
