//! `POST /v1/rerank` and `POST /rerank`: documents in either shape, results sorted best first,
//! `top_n` after sorting, `return_documents`.

use serde_json::json;

use super::*;

#[tokio::test]
async fn results_are_sorted_by_score_and_cut_to_top_n_on_both_paths() {
    for path in ["/v1/rerank", "/rerank"] {
        let backend = FakeBackend::replying(hello_world());
        let body = json!({
            "model": "reranker",
            "query": "which is longest?",
            "documents": ["mid one", {"text": "the longest one"}, "a"],
            "top_n": 2,
            "truncate": true,
        });
        let reply = post(&backend, path, body).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
        assert_eq!(
            reply.json(),
            json!({
                "model": "reranker",
                "object": "list",
                "results": [
                    {"index": 1, "relevance_score": 15.0},
                    {"index": 0, "relevance_score": 7.0},
                ],
                "usage": {"prompt_tokens": 6, "total_tokens": 6},
            }),
            "{path}"
        );
        let (model, request) = backend.reranks.lock().unwrap().pop().unwrap();
        assert_eq!(model, "reranker");
        assert_eq!(
            request,
            RerankRequest {
                query: "which is longest?".into(),
                documents: ["mid one", "the longest one", "a"]
                    .map(str::to_owned)
                    .to_vec(),
                truncate: true,
            }
        );
    }
}

#[tokio::test]
async fn return_documents_adds_each_documents_text() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "reranker", "query": "q", "documents": ["bb", {"text": "a"}],
                      "return_documents": true});
    let reply = post(&backend, "/v1/rerank", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    assert_eq!(
        reply.json()["results"],
        json!([
            {"index": 0, "relevance_score": 2.0, "document": {"text": "bb"}},
            {"index": 1, "relevance_score": 1.0, "document": {"text": "a"}},
        ])
    );
}

#[tokio::test]
async fn bad_requests_are_400s_in_the_openai_error_shape() {
    let backend = FakeBackend::replying(hello_world());
    let cases = [
        (
            json!({"model": "reranker", "query": "", "documents": ["a"]}),
            "query",
        ),
        (
            json!({"model": "reranker", "query": "q", "documents": []}),
            "documents",
        ),
        (
            json!({"model": "reranker", "query": "q", "documents": ["a", ""]}),
            "documents[1]",
        ),
        (
            json!({"model": "reranker", "query": "q", "documents": ["a"], "top_n": 0}),
            "top_n",
        ),
    ];
    for (body, param) in cases {
        let reply = post(&backend, "/v1/rerank", body.clone()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(reply.error()["param"], param, "{body}");
    }
    let reply = post(
        &backend,
        "/v1/rerank",
        json!({"model": "reranker", "query": "q"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    reply.error();
    assert!(backend.reranks.lock().unwrap().is_empty());
}
