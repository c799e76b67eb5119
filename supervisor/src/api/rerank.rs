//! `POST /v1/rerank` and `POST /rerank`, in the shape Jina, Cohere and llama.cpp share: a
//! `query`, `documents` as strings or `{"text": ...}` objects, `top_n`, `return_documents`;
//! the results sorted by `relevance_score`, best first, each with its document's `index`.
//!
//! `return_documents` defaults to false, as with Cohere and llama.cpp (Jina defaults to true).
//! The extension `truncate: true` cuts a query-document pair longer than the model's maximum
//! instead of refusing the request. The worker scores in document order; sorting and `top_n`
//! are done here.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use corral_ipc::{ModelKind, RerankRequest as WorkerRerank};
use serde::{Deserialize, Serialize};

use super::backend::{Backend, BackendError};
use super::error::ApiError;
use super::extract::ApiJson;
use super::generation::resolve_kind;
use super::served_model;

#[derive(Debug, Deserialize)]
pub struct RerankRequest {
    model: String,
    query: String,
    documents: Vec<Document>,
    #[serde(default)]
    top_n: Option<usize>,
    #[serde(default)]
    return_documents: bool,
    #[serde(default)]
    truncate: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Document {
    Text(String),
    Object { text: String },
}

impl Document {
    fn into_text(self) -> String {
        match self {
            Document::Text(text) | Document::Object { text } => text,
        }
    }
}

#[derive(Debug, Serialize)]
struct RerankResponse {
    model: String,
    object: &'static str,
    results: Vec<RerankResult>,
    usage: RerankUsage,
}

#[derive(Debug, Serialize)]
struct RerankResult {
    index: usize,
    relevance_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    document: Option<DocumentText>,
}

#[derive(Debug, Serialize)]
struct DocumentText {
    text: String,
}

#[derive(Debug, Serialize)]
struct RerankUsage {
    prompt_tokens: u32,
    total_tokens: u32,
}

/// Answers like `respond`, tagged with the requested model for the metrics.
pub async fn handler<B: Backend>(
    State(backend): State<Arc<B>>,
    ApiJson(body): ApiJson<RerankRequest>,
) -> Response {
    let served = served_model::resolve(backend.as_ref(), &body.model);
    served.attach(respond(backend, body).await)
}

async fn respond<B: Backend>(backend: Arc<B>, body: RerankRequest) -> Result<Response, ApiError> {
    if body.query.is_empty() {
        return Err(ApiError::invalid("query must not be empty", "query"));
    }
    if body.documents.is_empty() {
        return Err(ApiError::invalid(
            "documents must not be empty",
            "documents",
        ));
    }
    if body.top_n == Some(0) {
        return Err(ApiError::invalid("top_n must be at least 1", "top_n"));
    }
    let documents: Vec<String> = body
        .documents
        .into_iter()
        .map(Document::into_text)
        .collect();
    if let Some(index) = documents.iter().position(String::is_empty) {
        return Err(ApiError::invalid(
            format!("documents[{index}] must not be empty"),
            format!("documents[{index}]"),
        ));
    }
    let model = resolve_kind(backend.as_ref(), &body.model, ModelKind::Rerank)?;
    let request = WorkerRerank {
        query: body.query,
        documents: documents.clone(),
        truncate: body.truncate,
    };
    let scored = backend
        .rerank(&model, request)
        .await
        .map_err(|error| ApiError::input_too_long(error, "documents"))?;
    if scored.scores.len() != documents.len() {
        return Err(ApiError::Backend(BackendError::Internal {
            message: format!(
                "the worker for {model} answered {} scores for {} documents",
                scored.scores.len(),
                documents.len()
            ),
        }));
    }
    let results = ranked(
        &scored.scores,
        body.top_n,
        body.return_documents.then_some(documents),
    );
    let response = RerankResponse {
        model,
        object: "list",
        results,
        usage: RerankUsage {
            prompt_tokens: scored.prompt_tokens,
            total_tokens: scored.prompt_tokens,
        },
    };
    Ok(Json(response).into_response())
}

/// The documents by score, best first (ties keep document order), cut to `top_n`.
fn ranked(
    scores: &[f32],
    top_n: Option<usize>,
    documents: Option<Vec<String>>,
) -> Vec<RerankResult> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order.truncate(top_n.unwrap_or(scores.len()));
    order
        .into_iter()
        .map(|index| RerankResult {
            index,
            relevance_score: scores[index],
            document: documents.as_ref().map(|documents| DocumentText {
                text: documents[index].clone(),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_sorted_best_first_and_cut_after_sorting() {
        let scores = [0.1, 0.9, 0.5, 0.9];
        let indices = |results: Vec<RerankResult>| -> Vec<usize> {
            results.into_iter().map(|result| result.index).collect()
        };
        assert_eq!(indices(ranked(&scores, None, None)), [1, 3, 2, 0]);
        assert_eq!(indices(ranked(&scores, Some(2), None)), [1, 3]);
        assert_eq!(indices(ranked(&scores, Some(10), None)), [1, 3, 2, 0]);
        let documents = ["a", "b", "c", "d"].map(str::to_owned).to_vec();
        let results = ranked(&scores, Some(1), Some(documents));
        assert_eq!(
            results[0].document.as_ref().map(|d| d.text.as_str()),
            Some("b")
        );
    }
}
