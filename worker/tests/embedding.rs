//! The embedding engine on the real all-MiniLM-L6-v2 (`cargo xtask setup` fetches it into
//! `build/models/`): its vectors against sentence-transformers' (`tests/data/`), a text's vector
//! unchanged by what it is batched with, and the refusals a request can get.

use std::path::{Path, PathBuf};

use corral_ipc::{EmbedInput, EmbedRequest, FromWorker, RejectKind, RerankRequest};
use corral_worker::embedding::engine::{EncoderEngine, Work};

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
    engine
        .run(
            1,
            Work::Embed(EmbedRequest {
                inputs,
                truncate: false,
                dimensions: None,
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
