//! `POST /v1/embeddings` end to end with the real all-MiniLM-L6-v2: its vectors against
//! sentence-transformers' (`tests/data/minilm_reference.json`), over plain HTTP and through the
//! official `openai` SDK; every input shape, the refusals, and concurrent requests.

use std::ffi::OsStr;
use std::path::Path;
use std::thread;
use std::time::Duration;

use corral_fixture::{Arch, Size, Task};
use corral_tests::sdk;
use corral_tests::server::{Dirs, Server};
use corral_tests::{minilm_model, wait_until};
use serde_json::{Value, json};

const MODEL: &str = "all-MiniLM-L6-v2";

/// The vectors corral must reproduce, with what they were computed from.
struct Reference {
    sentences: Vec<String>,
    embeddings: Vec<Vec<f32>>,
    token_counts: Vec<u64>,
    token_ids: Vec<Vec<u64>>,
    query: String,
    documents: Vec<String>,
    ranking: Vec<usize>,
}

fn reference() -> Reference {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/minilm_reference.json");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item.as_str().unwrap().to_owned())
            .collect()
    };
    let retrieval = &json["retrieval"];
    Reference {
        sentences: strings(&json["sentences"]),
        embeddings: vectors(&json["embeddings"]),
        token_counts: numbers(&json["token_counts"]),
        token_ids: json["token_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(numbers)
            .collect(),
        query: retrieval["query"].as_str().unwrap().to_owned(),
        documents: strings(&retrieval["documents"]),
        ranking: numbers(&retrieval["ranking"])
            .into_iter()
            .map(|index| index as usize)
            .collect(),
    }
}

fn numbers(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item.as_u64().unwrap())
        .collect()
}

fn vectors(value: &Value) -> Vec<Vec<f32>> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|vector| {
            vector
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn assert_close(got: &[Vec<f32>], want: &[Vec<f32>], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (index, (got, want)) in got.iter().zip(want).enumerate() {
        let similarity = cosine(got, want);
        assert!(
            similarity > 0.9999,
            "{what}: input {index} has cosine {similarity} with the reference"
        );
    }
}

/// A server whose only model is MiniLM (linked into its models directory).
fn minilm_server(extra_args: &[&OsStr]) -> (Dirs, Server) {
    let dirs = Dirs::with_models(&[]);
    std::os::unix::fs::symlink(minilm_model(), dirs.models.path().join(MODEL)).unwrap();
    let server = Server::start_with(&dirs, extra_args);
    (dirs, server)
}

/// Posts an embeddings request and returns the status and the body.
fn embed(server: &Server, body: Value) -> (u16, Value) {
    let response = server.post("/v1/embeddings", &body);
    let status = response.status().as_u16();
    (status, response.json().unwrap())
}

fn embedding_vectors(body: &Value) -> Vec<Vec<f32>> {
    let data = body["data"].as_array().unwrap();
    for (index, item) in data.iter().enumerate() {
        assert_eq!(item["index"], index, "{body}");
        assert_eq!(item["object"], "embedding", "{body}");
    }
    vectors(&Value::Array(
        data.iter().map(|item| item["embedding"].clone()).collect(),
    ))
}

#[test]
fn minilm_vectors_and_retrieval_ranking_match_sentence_transformers() {
    let reference = reference();
    let (_dirs, server) = minilm_server(&[]);
    let models = server.get_json("/v1/models");
    let card = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|card| card["id"] == MODEL)
        .unwrap_or_else(|| panic!("{MODEL} not in {models}"))
        .clone();
    assert_eq!(card["kind"], "embedding", "{card}");
    assert_eq!(server.worker_row(MODEL)["kind"], "embedding");

    let (status, body) = embed(
        &server,
        json!({"model": MODEL, "input": reference.sentences}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "list");
    assert_eq!(body["model"], MODEL);
    assert_close(
        &embedding_vectors(&body),
        &reference.embeddings,
        "sentences",
    );
    let tokens: u64 = reference.token_counts.iter().sum();
    assert_eq!(body["usage"]["prompt_tokens"], tokens, "{body}");
    assert_eq!(body["usage"]["total_tokens"], tokens, "{body}");
    // Counted like chat requests: by route and model, with their prompt tokens.
    let metrics = server.metrics();
    let request_line = format!(
        "corral_http_requests_total{{route=\"/v1/embeddings\",model=\"{MODEL}\",status=\"200\"}} 1"
    );
    assert!(metrics.contains(&request_line), "{metrics}");
    let tokens_line = format!("corral_prompt_tokens_total{{model=\"{MODEL}\"}} {tokens}");
    assert!(metrics.contains(&tokens_line), "{metrics}");

    // The retrieval example: the documents ranked by cosine with the query, as the reference.
    let mut inputs = vec![reference.query.clone()];
    inputs.extend(reference.documents.iter().cloned());
    let (status, body) = embed(&server, json!({"model": MODEL, "input": inputs}));
    assert_eq!(status, 200, "{body}");
    let vectors = embedding_vectors(&body);
    let scores: Vec<f64> = vectors[1..]
        .iter()
        .map(|document| cosine(&vectors[0], document))
        .collect();
    let mut ranking: Vec<usize> = (0..scores.len()).collect();
    ranking.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    assert_eq!(ranking, reference.ranking, "scores {scores:?}");
}

#[test]
fn every_input_shape_embeds_as_the_same_text_does() {
    let reference = reference();
    let (_dirs, server) = minilm_server(&[]);
    let want = |indices: &[usize]| -> Vec<Vec<f32>> {
        indices
            .iter()
            .map(|&index| reference.embeddings[index].clone())
            .collect()
    };

    let (status, body) = embed(
        &server,
        json!({"model": MODEL, "input": reference.sentences[2]}),
    );
    assert_eq!(status, 200, "{body}");
    assert_close(&embedding_vectors(&body), &want(&[2]), "one string");
    assert_eq!(body["usage"]["prompt_tokens"], reference.token_counts[2]);

    // The reference's token ids are the tokenizer's, special tokens included: embedded as given.
    let (status, body) = embed(
        &server,
        json!({"model": MODEL, "input": reference.token_ids[0]}),
    );
    assert_eq!(status, 200, "{body}");
    assert_close(
        &embedding_vectors(&body),
        &want(&[0]),
        "one array of token ids",
    );

    let (status, body) = embed(
        &server,
        json!({"model": MODEL, "input": [reference.token_ids[1], reference.token_ids[3]]}),
    );
    assert_eq!(status, 200, "{body}");
    assert_close(
        &embedding_vectors(&body),
        &want(&[1, 3]),
        "arrays of token ids",
    );
    assert_eq!(
        body["usage"]["prompt_tokens"],
        reference.token_counts[1] + reference.token_counts[3]
    );

    // `user` is accepted and ignored; `encoding_format: float` is the default.
    let (status, body) = embed(
        &server,
        json!({"model": MODEL, "input": [reference.sentences[4]], "user": "someone",
               "encoding_format": "float"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_close(&embedding_vectors(&body), &want(&[4]), "float with a user");
}

#[test]
fn bad_inputs_and_dimensions_are_400s_naming_the_field_and_truncate_cuts_instead() {
    let (_dirs, server) = minilm_server(&[]);
    let long = "word ".repeat(600);

    for (body, param) in [
        (json!({"model": MODEL, "input": ""}), "input"),
        (json!({"model": MODEL, "input": []}), "input"),
        (json!({"model": MODEL, "input": ["fine", ""]}), "input[1]"),
        (json!({"model": MODEL, "input": ["fine", long]}), "input[1]"),
        (
            json!({"model": MODEL, "input": "fine", "dimensions": 64}),
            "dimensions",
        ),
    ] {
        let (status, answer) = embed(&server, body.clone());
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
        assert_eq!(answer["error"]["param"], param, "{answer}");
    }
    // A token id outside the vocabulary is the worker's to refuse.
    let (status, answer) = embed(
        &server,
        json!({"model": MODEL, "input": [[101, 99999999, 102]]}),
    );
    assert_eq!(status, 400, "{answer}");

    let (status, answer) = embed(
        &server,
        json!({"model": MODEL, "input": ["fine", long], "truncate": true}),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(embedding_vectors(&answer).len(), 2);
    // all-MiniLM-L6-v2 takes 256 tokens at most.
    let fine_tokens = 3;
    assert_eq!(
        answer["usage"]["prompt_tokens"],
        fine_tokens + 256,
        "{answer}"
    );

    // A chat request to the embedding model, refused before any worker is asked.
    let response = server.post(
        "/v1/chat/completions",
        &json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(response.status(), 400);
    let answer: Value = response.json().unwrap();
    assert_eq!(answer["error"]["code"], "model_not_supported", "{answer}");
    assert_eq!(answer["error"]["param"], "model", "{answer}");
}

#[test]
fn the_openai_sdk_gets_the_reference_vectors_as_floats_and_base64() {
    let reference = reference();
    let (_dirs, server) = minilm_server(&[]);
    let sentences = serde_json::to_string(&reference.sentences[..4]).unwrap();
    let output = sdk::run(
        "openai_embeddings.py",
        &server.url("/v1"),
        &[MODEL, &sentences],
    );
    let runs: Vec<Value> = output
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let encodings: Vec<&str> = runs
        .iter()
        .map(|run| run["encoding"].as_str().unwrap())
        .collect();
    assert_eq!(encodings, ["default", "float", "base64"]);
    for run in &runs {
        let what = format!("the SDK with {}", run["encoding"]);
        assert_close(&vectors(&run["vectors"]), &reference.embeddings[..4], &what);
        let tokens: u64 = reference.token_counts[..4].iter().sum();
        assert_eq!(run["prompt_tokens"], tokens, "{what}");
    }
}

#[test]
fn concurrent_requests_to_one_embedding_model_each_get_their_own_vectors() {
    let reference = reference();
    let (_dirs, server) = minilm_server(&[]);
    let server = &server;
    let reference = &reference;
    thread::scope(|scope| {
        for client in 0..6 {
            scope.spawn(move || {
                for round in 0..4 {
                    // Each client asks for a different pair, so answers cannot be swapped
                    // unnoticed.
                    let count = reference.sentences.len();
                    let indices = [(client + round) % count, (client * 3 + round + 1) % count];
                    let inputs: Vec<&str> = indices
                        .iter()
                        .map(|&index| reference.sentences[index].as_str())
                        .collect();
                    let (status, body) = embed(server, json!({"model": MODEL, "input": inputs}));
                    assert_eq!(status, 200, "{body}");
                    let want: Vec<Vec<f32>> = indices
                        .iter()
                        .map(|&index| reference.embeddings[index].clone())
                        .collect();
                    let what = format!("client {client}, round {round}");
                    assert_close(&embedding_vectors(&body), &want, &what);
                }
            });
        }
    });
    assert_eq!(server.worker_row(MODEL)["leases"], 0);
    assert_eq!(server.worker_pids().len(), 1);
}

#[test]
fn a_client_that_leaves_mid_request_gives_its_lease_back_and_the_worker_serves_on() {
    let reference = reference();
    let (_dirs, server) = minilm_server(&[]);
    let long = reference.sentences.last().unwrap().clone();
    let inputs = vec![long; 256];
    // Gives up long before 256 inputs of 155 tokens are embedded, on any machine this runs on;
    // should it not, the request simply finishes, and the rest holds the same.
    let impatient = reqwest::blocking::Client::builder()
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let sent = impatient
        .post(server.url("/v1/embeddings"))
        .json(&json!({"model": MODEL, "input": inputs}))
        .send();
    assert!(sent.is_err() || sent.unwrap().status() == 200);
    wait_until("the abandoned request's lease to end", || {
        server.worker_row(MODEL)["leases"] == 0
    });
    let (status, body) = embed(
        &server,
        json!({"model": MODEL, "input": reference.sentences[0]}),
    );
    assert_eq!(status, 200, "{body}");
    assert_close(
        &embedding_vectors(&body),
        &reference.embeddings[..1],
        "after the abandoned one",
    );
}

#[test]
fn a_decoder_embedding_model_embeds_each_input_as_it_does_alone() {
    let dirs = Dirs::with_models(&[]);
    dirs.add_task_fixture("qwen3-embedder", Size::Tiny, Arch::Qwen3, Task::Embedding);
    let server = Server::start(&dirs);
    assert_eq!(server.worker_row("qwen3-embedder")["kind"], "embedding");
    let texts = [
        "the first text",
        "a second, longer text than the first one",
        "3",
    ];
    let (status, body) = embed(&server, json!({"model": "qwen3-embedder", "input": texts}));
    assert_eq!(status, 200, "{body}");
    let together = embedding_vectors(&body);
    for (index, text) in texts.iter().enumerate() {
        let (status, body) = embed(&server, json!({"model": "qwen3-embedder", "input": text}));
        assert_eq!(status, 200, "{body}");
        let alone = embedding_vectors(&body);
        assert_close(
            &alone,
            &together[index..=index],
            &format!("input {index} alone"),
        );
    }
    let response = server.post(
        "/v1/chat/completions",
        &json!({"model": "qwen3-embedder", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(response.status(), 400);

    // `prompt_name: "query"` is the fixture's query instruction written before the text.
    let instruction = "Instruct: Given a web search query, retrieve relevant passages that \
                       answer the query\nQuery:";
    let query = |body: Value| {
        let (status, body) = embed(&server, body);
        assert_eq!(status, 200, "{body}");
        embedding_vectors(&body)
    };
    let prompted = query(json!({"model": "qwen3-embedder", "input": texts[0],
                                "prompt_name": "query"}));
    let written = query(json!({"model": "qwen3-embedder",
                               "input": format!("{instruction}{}", texts[0])}));
    assert_close(&prompted, &written, "the query prompt");
    assert!(
        cosine(&prompted[0], &together[0]) < 0.9999,
        "the prompt changed nothing"
    );
    let (status, body) = embed(
        &server,
        json!({"model": "qwen3-embedder", "input": "x", "prompt_name": "passage"}),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "prompt_name", "{body}");
}
