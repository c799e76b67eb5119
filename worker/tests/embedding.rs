//! The embedding engine on the real all-MiniLM-L6-v2 (`cargo xtask setup` fetches it into
//! `build/models/`; these tests say SKIPPED and pass where it is absent) and on the encoder and
//! decoder fixtures: vectors and scores against sentence-transformers' and transformers'
//! (`tests/data/`), a text's vector unchanged by what it is batched with, the refusals a request
//! can get, and `describe`'s kinds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size, Task};
use corral_ipc::{EmbedInput, EmbedRequest, FromWorker, ModelKind, RejectKind, RerankRequest};
use corral_worker::describe::describe;
use corral_worker::embedding::engine::{EncodeJob, EncoderEngine, Work};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The real model, or `None` (and a line saying the test is skipped) where set-up has not
/// fetched it.
fn minilm() -> Option<PathBuf> {
    let path = workspace().join("build/models/all-MiniLM-L6-v2");
    if path.join("model.safetensors").is_file() {
        Some(path)
    } else {
        eprintln!(
            "SKIPPED: {} is absent (run `cargo xtask setup`)",
            path.display()
        );
        None
    }
}

fn texts(texts: &[&str]) -> Vec<EmbedInput> {
    texts
        .iter()
        .map(|text| EmbedInput::Text((*text).to_owned()))
        .collect()
}

fn embed(engine: &EncoderEngine, inputs: Vec<EmbedInput>) -> FromWorker {
    embed_after_prompt(engine, inputs, None)
}

fn embed_after_prompt(
    engine: &EncoderEngine,
    inputs: Vec<EmbedInput>,
    prompt_name: Option<&str>,
) -> FromWorker {
    engine
        .run(
            1,
            Work::Embed(EmbedRequest {
                inputs,
                truncate: false,
                dimensions: None,
                prompt_name: prompt_name.map(str::to_owned),
            }),
        )
        .unwrap()
}

fn vectors(answer: FromWorker) -> (Vec<Vec<f32>>, u32) {
    match answer {
        FromWorker::Embeddings {
            vectors,
            prompt_tokens,
            ..
        } => (vectors, prompt_tokens),
        other => panic!("expected embeddings, got {other:?}"),
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

#[test]
fn a_text_gets_the_same_vector_alone_and_in_a_padded_batch() {
    let Some(model) = minilm() else { return };
    let engine = EncoderEngine::start(model).unwrap();
    let text = "The quick brown fox jumps over the lazy dog.";
    let (alone, _) = vectors(embed(&engine, texts(&[text])));
    let batch = texts(&[
        "Short.",
        text,
        "A much longer sentence that pads every shorter row of its batch with a good many tokens, \
         so that the fox's row is mostly padding.",
        "Medium length words here.",
    ]);
    let (together, _) = vectors(embed(&engine, batch));
    assert_eq!(together.len(), 4);
    assert_eq!(alone[0].len(), 384);
    for (x, y) in alone[0].iter().zip(&together[1]) {
        assert!((x - y).abs() < 1e-5, "{x} vs {y}");
    }
    let norm: f32 = alone[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "normalized: {norm}");
}

#[test]
fn token_ids_embed_like_their_text() {
    let Some(model) = minilm() else { return };
    let engine = EncoderEngine::start(model).unwrap();
    // "[CLS] hello world [SEP]" in MiniLM's vocabulary.
    let (from_ids, tokens) = vectors(embed(
        &engine,
        vec![EmbedInput::Tokens(vec![101, 7592, 2088, 102])],
    ));
    let (from_text, text_tokens) = vectors(embed(&engine, texts(&["hello world"])));
    assert_eq!((tokens, text_tokens), (4, 4));
    assert!(cosine(&from_ids[0], &from_text[0]) > 0.99999);
}

#[test]
fn refusals_name_the_input_at_fault() {
    let Some(model) = minilm() else { return };
    let engine = EncoderEngine::start(model).unwrap();
    let long = "word ".repeat(400);
    let request = |truncate, dimensions, inputs| {
        Work::Embed(EmbedRequest {
            inputs,
            truncate,
            dimensions,
            prompt_name: None,
        })
    };
    let rejected = |answer| match answer {
        FromWorker::Rejected { kind, param, .. } => (kind, param),
        other => panic!("expected a rejection, got {other:?}"),
    };
    let too_long = engine
        .run(1, request(false, None, texts(&["fine", &long])))
        .unwrap();
    assert_eq!(
        rejected(too_long),
        (RejectKind::PromptTooLong, Some("input[1]".into()))
    );
    let (cut, tokens) = vectors(engine.run(2, request(true, None, texts(&[&long]))).unwrap());
    assert_eq!((cut.len(), tokens), (1, 256));
    let bad_ids = engine
        .run(
            3,
            request(false, None, vec![EmbedInput::Tokens(vec![101, 999_999])]),
        )
        .unwrap();
    assert_eq!(
        rejected(bad_ids),
        (RejectKind::InvalidRequest, Some("input[0]".into()))
    );
    let dimensions = engine
        .run(4, request(false, Some(64), texts(&["hi"])))
        .unwrap();
    assert_eq!(
        rejected(dimensions),
        (RejectKind::Unsupported, Some("dimensions".into()))
    );
    let empty = engine
        .run(
            6,
            request(false, None, vec![EmbedInput::Tokens(Vec::new())]),
        )
        .unwrap();
    assert_eq!(
        rejected(empty),
        (RejectKind::InvalidRequest, Some("input[0]".into()))
    );
    let rerank = engine
        .run(
            5,
            Work::Rerank(RerankRequest {
                query: "q".into(),
                documents: vec!["d".into()],
                truncate: false,
            }),
        )
        .unwrap();
    assert_eq!(rejected(rerank).0, RejectKind::Unsupported);
}

#[test]
fn an_empty_request_is_answered_with_no_vectors() {
    let Some(model) = minilm() else { return };
    let engine = EncoderEngine::start(model).unwrap();
    assert_eq!(vectors(embed(&engine, Vec::new())), (Vec::new(), 0));
}

fn reference(name: &str) -> serde_json::Value {
    let path = workspace().join("tests/data").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn floats(value: &serde_json::Value) -> Vec<f32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn minilm_vectors_match_sentence_transformers() {
    let Some(model) = minilm() else { return };
    let reference = reference("minilm_reference.json");
    let engine = EncoderEngine::start(model).unwrap();
    let sentences = strings(&reference["sentences"]);
    let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
    for (index, sentence) in refs.iter().enumerate() {
        let (vector, tokens) = vectors(embed(&engine, texts(&[sentence])));
        let expected = floats(&reference["embeddings"][index]);
        let similarity = cosine(&vector[0], &expected);
        assert!(similarity > 0.9999, "sentence {index}: cosine {similarity}");
        assert_eq!(
            u64::from(tokens),
            reference["token_counts"][index].as_u64().unwrap(),
            "sentence {index}"
        );
    }
    // All at once, batched by length, in the same order.
    let (together, _) = vectors(embed(&engine, texts(&refs)));
    for (index, vector) in together.iter().enumerate() {
        assert!(cosine(vector, &floats(&reference["embeddings"][index])) > 0.9999);
    }
    let retrieval = &reference["retrieval"];
    let query = retrieval["query"].as_str().unwrap();
    let documents = strings(&retrieval["documents"]);
    let (query, _) = vectors(embed(&engine, texts(&[query])));
    let document_refs: Vec<&str> = documents.iter().map(String::as_str).collect();
    let (documents, _) = vectors(embed(&engine, texts(&document_refs)));
    let scores: Vec<f32> = documents.iter().map(|d| cosine(d, &query[0])).collect();
    let mut ranking: Vec<usize> = (0..scores.len()).collect();
    ranking.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let expected: Vec<usize> = retrieval["ranking"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(ranking, expected, "scores {scores:?}");
}

fn fixture(arch: Arch, size: Size, task: Task, dir: &Path) -> PathBuf {
    let options = FixtureOptions {
        size,
        arch,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    corral_fixture::generate_for_task(&options, task, dir).unwrap();
    dir.to_path_buf()
}

/// Embeds `inputs` as texts and checks token ids and vectors against transformers'.
/// Each of `inputs` as text (after the model's prompt `prompt_name`) and as the reference's
/// token ids (which include the prompt's), against the reference's vectors.
fn check_embeddings(
    engine: &EncoderEngine,
    inputs: &[String],
    prompt_name: Option<&str>,
    ids: &serde_json::Value,
    embeddings: &serde_json::Value,
    name: &str,
) {
    for (index, input) in inputs.iter().enumerate() {
        let expected_ids: Vec<u32> = ids[index]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_u64().unwrap() as u32)
            .collect();
        let (from_text, tokens) = vectors(embed_after_prompt(engine, texts(&[input]), prompt_name));
        assert_eq!(tokens as usize, expected_ids.len(), "{name} input {index}");
        let (from_ids, _) = vectors(embed(engine, vec![EmbedInput::Tokens(expected_ids)]));
        let expected = floats(&embeddings[index]);
        for vector in [&from_text[0], &from_ids[0]] {
            let similarity = cosine(vector, &expected);
            assert!(
                similarity > 0.9999,
                "{name} input {index}: cosine {similarity}"
            );
        }
    }
}

#[test]
fn fixture_embeddings_match_transformers() {
    let reference = reference("encoder_reference.json");
    let root = tempfile::tempdir().unwrap();
    for (name, arch, size) in [
        ("tiny-bert-embedding", Arch::Bert, Size::Tiny),
        ("small-bert-embedding", Arch::Bert, Size::Small),
        ("tiny-qwen3-embedding", Arch::Qwen3, Size::Tiny),
        ("tiny-xlmr-embedding", Arch::XlmRoberta, Size::Tiny),
    ] {
        let expected = &reference["fixtures"][name];
        let dir = fixture(arch, size, Task::Embedding, &root.path().join(name));
        let engine = EncoderEngine::start(dir).unwrap();
        let inputs = strings(&expected["inputs"]);
        check_embeddings(
            &engine,
            &inputs,
            None,
            &expected["token_ids"],
            &expected["embeddings"],
            name,
        );
        if expected["query_prompt"].is_string() {
            check_embeddings(
                &engine,
                &strings(&expected["queries"]),
                Some("query"),
                &expected["query_token_ids"],
                &expected["query_embeddings"],
                name,
            );
            match embed_after_prompt(&engine, texts(&["a query"]), Some("passage")) {
                FromWorker::Rejected { kind, param, .. } => {
                    assert_eq!(kind, RejectKind::InvalidRequest, "{name}");
                    assert_eq!(param.as_deref(), Some("prompt_name"), "{name}");
                }
                other => panic!("{name}: an unknown prompt name gave {other:?}"),
            }
        }
    }
}

fn scores(answer: FromWorker) -> Vec<f32> {
    match answer {
        FromWorker::Scores { scores, .. } => scores,
        other => panic!("expected scores, got {other:?}"),
    }
}

fn rerank(engine: &EncoderEngine, query: &str, documents: &[String]) -> Vec<f32> {
    scores(
        engine
            .run(
                1,
                Work::Rerank(RerankRequest {
                    query: query.to_owned(),
                    documents: documents.to_vec(),
                    truncate: false,
                }),
            )
            .unwrap(),
    )
}

#[test]
fn fixture_cross_encoder_scores_are_the_sigmoid_of_transformers_logits() {
    let reference = reference("encoder_reference.json");
    let root = tempfile::tempdir().unwrap();
    for (name, arch) in [
        ("tiny-bert-rerank", Arch::Bert),
        ("tiny-xlmr-rerank", Arch::XlmRoberta),
    ] {
        let expected = &reference["fixtures"][name];
        let dir = fixture(arch, Size::Tiny, Task::Rerank, &root.path().join(name));
        let engine = EncoderEngine::start(dir).unwrap();
        let query = expected["query"].as_str().unwrap();
        let documents = strings(&expected["documents"]);
        let got = rerank(&engine, query, &documents);
        let logits = floats(&expected["logits"]);
        assert_eq!(got.len(), logits.len(), "{name}");
        for (index, (score, logit)) in got.iter().zip(&logits).enumerate() {
            let sigmoid = 1.0 / (1.0 + (-logit).exp());
            assert!(
                (score - sigmoid).abs() < 1e-4,
                "{name} document {index}: {score} vs sigmoid({logit})"
            );
        }
        // Each document scores the same alone as beside the others.
        for (index, document) in documents.iter().enumerate() {
            let alone = rerank(&engine, query, std::slice::from_ref(document));
            assert!(
                (alone[0] - got[index]).abs() < 1e-5,
                "{name} document {index}"
            );
        }
    }
}

#[test]
fn a_decoder_reranker_scores_probabilities_of_yes_unchanged_by_batching() {
    let root = tempfile::tempdir().unwrap();
    let dir = fixture(
        Arch::Qwen3,
        Size::Tiny,
        Task::Chat,
        &root.path().join("tiny-qwen3-reranker"),
    );
    let engine = EncoderEngine::start(dir).unwrap();
    let documents: Vec<String> = [
        "The river ran slowly past the old mill.",
        "a",
        "The ferry had not come yet, so they waited on the quay until the evening.",
    ]
    .map(String::from)
    .to_vec();
    let together = rerank(&engine, "where does the river go", &documents);
    for (index, document) in documents.iter().enumerate() {
        let alone = rerank(
            &engine,
            "where does the river go",
            std::slice::from_ref(document),
        );
        assert!((0.0..=1.0).contains(&together[index]), "{together:?}");
        assert!(
            (alone[0] - together[index]).abs() < 1e-4,
            "{alone:?} vs {together:?}"
        );
    }
}

#[test]
fn describe_gives_each_fixture_its_kind() {
    let root = tempfile::tempdir().unwrap();
    for (name, arch, task, kind) in [
        (
            "bert-embedding",
            Arch::Bert,
            Task::Embedding,
            ModelKind::Embedding,
        ),
        ("bert-rerank", Arch::Bert, Task::Rerank, ModelKind::Rerank),
        (
            "xlmr-embedding",
            Arch::XlmRoberta,
            Task::Embedding,
            ModelKind::Embedding,
        ),
        (
            "xlmr-rerank",
            Arch::XlmRoberta,
            Task::Rerank,
            ModelKind::Rerank,
        ),
        (
            "qwen3-embedding",
            Arch::Qwen3,
            Task::Embedding,
            ModelKind::Embedding,
        ),
        ("qwen3-reranker", Arch::Qwen3, Task::Chat, ModelKind::Rerank),
        ("qwen3-chat", Arch::Qwen3, Task::Chat, ModelKind::Chat),
    ] {
        let dir = fixture(arch, Size::Tiny, task, &root.path().join(name));
        let description = describe(&dir);
        assert_eq!(
            (description.kind, description.unservable),
            (kind, None),
            "{name}"
        );
    }
}

#[test]
fn a_cancelled_request_still_ends_with_one_frame() {
    let Some(model) = minilm() else { return };
    let engine = EncoderEngine::start(model).unwrap();
    let (answer, answered) = std::sync::mpsc::channel();
    engine
        .submit(EncodeJob {
            id: 9,
            work: Work::Embed(EmbedRequest {
                inputs: texts(&["never embedded"]),
                truncate: false,
                dimensions: None,
                prompt_name: None,
            }),
            cancel: Arc::new(AtomicBool::new(true)),
            reply: Box::new(move |message| answer.send(message).unwrap()),
        })
        .unwrap();
    match answered.recv().unwrap() {
        FromWorker::Error { id, message } => assert_eq!((id, message.as_str()), (9, "cancelled")),
        other => panic!("expected the cancellation's Error, got {other:?}"),
    }
    // The engine goes on serving.
    assert_eq!(vectors(embed(&engine, texts(&["still here"]))).0.len(), 1);
}
