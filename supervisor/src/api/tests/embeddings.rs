//! `POST /v1/embeddings`: OpenAI's shapes in and out, the refusals before any worker is asked,
//! and models of the wrong kind refused by every endpoint in its own API's shape.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use corral_ipc::{EmbedInput, RejectKind};
use serde_json::json;

use super::*;

fn embeds(backend: &FakeBackend) -> Vec<(String, EmbedRequest)> {
    backend.embeds.lock().unwrap().clone()
}

#[tokio::test]
async fn an_array_of_strings_gets_one_float_vector_each_in_order() {
    let backend = FakeBackend::replying(hello_world());
    let reply = post(
        &backend,
        "/v1/embeddings",
        json!({"model": "embedder", "input": ["a", "b"], "user": "someone"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    assert_eq!(
        reply.json(),
        json!({
            "object": "list",
            "data": [
                {"object": "embedding", "index": 0, "embedding": [0.0, 1.0]},
                {"object": "embedding", "index": 1, "embedding": [1.0, 0.5]},
            ],
            "model": "embedder",
            "usage": {"prompt_tokens": 2, "total_tokens": 2},
        })
    );
    let (model, request) = embeds(&backend).pop().unwrap();
    assert_eq!(model, "embedder");
    assert_eq!(
        request,
        EmbedRequest {
            inputs: vec![EmbedInput::Text("a".into()), EmbedInput::Text("b".into())],
            truncate: false,
            dimensions: None,
            prompt_name: None,
        }
    );
}

#[tokio::test]
async fn token_ids_truncate_dimensions_and_prompt_name_reach_the_worker() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "embedder", "input": [[1, 2], [3]], "truncate": true,
                      "dimensions": 64, "prompt_name": "query"});
    let reply = post(&backend, "/v1/embeddings", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let (_, request) = embeds(&backend).pop().unwrap();
    assert_eq!(
        request,
        EmbedRequest {
            inputs: vec![EmbedInput::Tokens(vec![1, 2]), EmbedInput::Tokens(vec![3])],
            truncate: true,
            dimensions: Some(64),
            prompt_name: Some("query".into()),
        }
    );
}

#[tokio::test]
async fn base64_encodes_little_endian_f32() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "embedder", "input": ["a", "b"], "encoding_format": "base64"});
    let reply = post(&backend, "/v1/embeddings", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let text = reply.json()["data"][1]["embedding"]
        .as_str()
        .unwrap()
        .to_owned();
    let bytes = BASE64.decode(text).unwrap();
    let floats: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|chunk| f32::from_le_bytes(chunk.try_into().unwrap()))
        .collect();
    assert_eq!(floats, [1.0, 0.5]);
}

#[tokio::test]
async fn bad_inputs_are_400s_naming_the_field_before_the_backend_is_asked() {
    let backend = FakeBackend::replying(hello_world());
    let cases = [
        (json!({"model": "embedder", "input": ""}), "input"),
        (json!({"model": "embedder", "input": []}), "input"),
        (
            json!({"model": "embedder", "input": ["ok", ""]}),
            "input[1]",
        ),
        (json!({"model": "embedder", "input": [[1], []]}), "input[1]"),
        (
            json!({"model": "embedder", "input": [[1], [-1]]}),
            "input[1]",
        ),
        (
            json!({"model": "embedder", "input": ["a", {"x": 1}]}),
            "input[1]",
        ),
        (
            json!({"model": "embedder", "input": "a", "encoding_format": "int8"}),
            "encoding_format",
        ),
        (
            json!({"model": "embedder", "input": "a", "dimensions": 0}),
            "dimensions",
        ),
    ];
    for (body, param) in cases {
        let reply = post(&backend, "/v1/embeddings", body.clone()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(reply.error()["param"], param, "{body}");
    }
    let reply = post(&backend, "/v1/embeddings", json!({"model": "embedder"})).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(embeds(&backend).is_empty());
}

#[tokio::test]
async fn the_workers_refusals_keep_their_param() {
    let backend = FakeBackend::failing(BackendError::Rejected {
        kind: RejectKind::Unsupported,
        message: "embedder was not trained for dimensions".into(),
        param: Some("dimensions".into()),
    });
    let body = json!({"model": "embedder", "input": "a", "dimensions": 8});
    let reply = post(&backend, "/v1/embeddings", body).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error()["param"], "dimensions");

    let backend = FakeBackend::failing(BackendError::Rejected {
        kind: RejectKind::PromptTooLong,
        message: "input[1] has 600 tokens, more than the model's 512".into(),
        param: Some("input[1]".into()),
    });
    let body = json!({"model": "embedder", "input": ["a", "b"]});
    let reply = post(&backend, "/v1/embeddings", body).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.json());
    let error = reply.error();
    assert_eq!(error["param"], "input[1]");
    assert_eq!(error["code"], "context_length_exceeded");
}

#[tokio::test]
async fn unknown_models_are_404s() {
    let backend = FakeBackend::replying(hello_world());
    let reply = post(
        &backend,
        "/v1/embeddings",
        json!({"model": "nope", "input": "a"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.error()["code"], "model_not_found");
}

#[tokio::test]
async fn each_endpoint_refuses_a_model_of_another_kind_in_its_own_shape() {
    let backend = FakeBackend::replying(hello_world());
    let refusals = [
        ("/v1/embeddings", json!({"model": "tiny", "input": "a"})),
        ("/v1/embeddings", json!({"model": "reranker", "input": "a"})),
        (
            "/v1/rerank",
            json!({"model": "tiny", "query": "q", "documents": ["d"]}),
        ),
        (
            "/rerank",
            json!({"model": "embedder", "query": "q", "documents": ["d"]}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": "embedder", "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            "/v1/completions",
            json!({"model": "reranker", "prompt": "hi"}),
        ),
        ("/v1/responses", json!({"model": "embedder", "input": "hi"})),
    ];
    for (path, body) in refusals {
        let reply = post(&backend, path, body.clone()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{path} {body}");
        let error = reply.error();
        assert_eq!(error["param"], "model", "{path}");
        assert_eq!(error["code"], "model_not_supported", "{path}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(body["model"].as_str().unwrap()),
            "{message}"
        );
    }
    let reply = post(
        &backend,
        "/v1/messages",
        json!({"model": "embedder", "max_tokens": 8,
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json()["type"], "error");
    assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("an embedding model"), "{message}");
    assert!(message.contains("/v1/embeddings"), "{message}");
    assert_eq!(backend.request_count(), 0);
    assert!(embeds(&backend).is_empty());
    assert!(backend.reranks.lock().unwrap().is_empty());
}
