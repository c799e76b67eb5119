//! `POST /v1/rerank` and `POST /rerank` end to end on a generated cross-encoder: results sorted
//! by score, each score the document's own, `top_n` after sorting, `return_documents`, and the
//! kinds each endpoint refuses.

use corral_fixture::{Arch, Size, Task};
use corral_tests::server::{Dirs, Server};
use serde_json::{Value, json};

const QUERY: &str = "how do plants drink water";

fn documents() -> Vec<Value> {
    vec![
        json!("roots take up water from the soil"),
        json!({"text": "the stock market fell on tuesday"}),
        json!("leaves lose water through small pores"),
        json!({"text": "a recipe for bread"}),
        json!("water moves up the stem in narrow tubes"),
    ]
}

fn text_of(document: &Value) -> &str {
    document
        .as_str()
        .or_else(|| document["text"].as_str())
        .unwrap()
}

fn server() -> (Dirs, Server) {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    dirs.add_task_fixture("reranker", Size::Tiny, Arch::Bert, Task::Rerank);
    dirs.add_task_fixture("embedder", Size::Tiny, Arch::Bert, Task::Embedding);
    let server = Server::start(&dirs);
    (dirs, server)
}

fn rerank(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let response = server.post(path, &body);
    let status = response.status().as_u16();
    (status, response.json().unwrap())
}

/// The results' `(index, relevance_score)`, checked sorted best first.
fn ranked(body: &Value) -> Vec<(usize, f64)> {
    let results: Vec<(usize, f64)> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|result| {
            (
                result["index"].as_u64().unwrap() as usize,
                result["relevance_score"].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(
        results.windows(2).all(|pair| pair[0].1 >= pair[1].1),
        "not sorted best first: {body}"
    );
    results
}

#[test]
fn results_are_sorted_scores_of_each_document_on_both_paths_with_top_n_and_documents() {
    let (_dirs, server) = server();
    let models = server.get_json("/v1/models");
    let kinds: Vec<(String, String)> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|card| {
            (
                card["id"].as_str().unwrap().to_owned(),
                card["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (id, kind) in [
        ("embedder", "embedding"),
        ("llama", "chat"),
        ("reranker", "rerank"),
    ] {
        assert!(
            kinds.contains(&(id.to_owned(), kind.to_owned())),
            "{models}"
        );
    }

    let body = json!({"model": "reranker", "query": QUERY, "documents": documents()});
    let (status, full) = rerank(&server, "/v1/rerank", body.clone());
    assert_eq!(status, 200, "{full}");
    assert_eq!(full["model"], "reranker");
    assert!(
        full["usage"]["prompt_tokens"].as_u64().unwrap() > 0,
        "{full}"
    );
    let ranking = ranked(&full);
    let mut indices: Vec<usize> = ranking.iter().map(|(index, _)| *index).collect();
    indices.sort_unstable();
    assert_eq!(indices, [0, 1, 2, 3, 4], "{full}");
    assert!(
        full["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|result| result.get("document").is_none()),
        "documents are returned only when asked for: {full}"
    );

    // The other path answers the same.
    let (status, again) = rerank(&server, "/rerank", body);
    assert_eq!(status, 200, "{again}");
    assert_close(&ranked(&again), &ranking);

    // Each score is its own document's: scored alone, each document gets the same score.
    for &(index, score) in &ranking {
        let alone = json!({"model": "reranker", "query": QUERY, "documents": [documents()[index]]});
        let (status, answer) = rerank(&server, "/v1/rerank", alone);
        assert_eq!(status, 200, "{answer}");
        let (_, alone_score) = ranked(&answer)[0];
        assert!(
            (alone_score - score).abs() < 1e-3,
            "document {index}: {alone_score} alone, {score} in the batch"
        );
    }

    // top_n is applied after sorting, and return_documents adds each one's text.
    let body = json!({"model": "reranker", "query": QUERY, "documents": documents(),
                      "top_n": 2, "return_documents": true});
    let (status, top) = rerank(&server, "/rerank", body);
    assert_eq!(status, 200, "{top}");
    assert_close(&ranked(&top), &ranking[..2]);
    for result in top["results"].as_array().unwrap() {
        let index = result["index"].as_u64().unwrap() as usize;
        assert_eq!(
            result["document"]["text"],
            text_of(&documents()[index]),
            "{top}"
        );
    }
}

fn assert_close(got: &[(usize, f64)], want: &[(usize, f64)]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (got, want) in got.iter().zip(want) {
        assert_eq!(got.0, want.0, "{got:?} vs {want:?}");
        assert!((got.1 - want.1).abs() < 1e-4, "{got:?} vs {want:?}");
    }
}

#[test]
fn each_endpoint_refuses_the_other_kinds_and_bad_requests_name_the_field() {
    let (_dirs, server) = server();
    let refusals = [
        (
            "/v1/rerank",
            json!({"model": "embedder", "query": QUERY, "documents": ["a"]}),
        ),
        (
            "/rerank",
            json!({"model": "llama", "query": QUERY, "documents": ["a"]}),
        ),
        ("/v1/embeddings", json!({"model": "reranker", "input": "a"})),
        ("/v1/embeddings", json!({"model": "llama", "input": "a"})),
        (
            "/v1/completions",
            json!({"model": "reranker", "prompt": "a", "max_tokens": 2}),
        ),
    ];
    for (path, body) in refusals {
        let (status, answer) = rerank(&server, path, body);
        assert_eq!(status, 400, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "model_not_supported", "{answer}");
    }
    // Refused before any worker started.
    assert!(server.worker_pids().is_empty());

    // A pair longer than the model takes is refused naming the document, unless cut.
    let long = "word ".repeat(2000);
    let body = json!({"model": "reranker", "query": QUERY, "documents": ["short", long]});
    let (status, answer) = rerank(&server, "/v1/rerank", body);
    assert_eq!(status, 400, "{answer}");
    assert_eq!(
        answer["error"]["code"], "context_length_exceeded",
        "{answer}"
    );
    assert_eq!(answer["error"]["param"], "documents[1]", "{answer}");
    let body = json!({"model": "reranker", "query": QUERY, "documents": ["short", long],
                      "truncate": true});
    let (status, answer) = rerank(&server, "/v1/rerank", body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(ranked(&answer).len(), 2);

    for (body, param) in [
        (
            json!({"model": "reranker", "query": "", "documents": ["a"]}),
            "query",
        ),
        (
            json!({"model": "reranker", "query": QUERY, "documents": []}),
            "documents",
        ),
        (
            json!({"model": "reranker", "query": QUERY, "documents": ["a", {"text": ""}]}),
            "documents[1]",
        ),
        (
            json!({"model": "reranker", "query": QUERY, "documents": ["a"], "top_n": 0}),
            "top_n",
        ),
    ] {
        let (status, answer) = rerank(&server, "/v1/rerank", body);
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["param"], param, "{answer}");
    }
}
