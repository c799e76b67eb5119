//! `POST /v1/chat/completions`: the request, its validation into a worker request, and the
//! handler. The response shapes live in `chat_response.rs`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use corral_ipc::{GenerateRequest, Prompt};
use serde::Deserialize;
use serde_json::Value;

use super::backend::Backend;
use super::chat_response::{ChatChunks, ChatCompletion};
use super::error::ApiError;
use super::extract::ApiJson;
use super::generation;
use super::messages;
use super::sampling::{self, SamplingParams};
use super::served_model;
use super::sse;

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(flatten)]
    pub params: SamplingParams,
    pub messages: Vec<Value>,
    /// OpenAI's newer name for `max_tokens`; it wins when both are set.
    pub max_completion_tokens: Option<u32>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u32>,
    pub tools: Option<Vec<Value>>,
}

impl ChatRequest {
    fn into_generate(self) -> Result<GenerateRequest, ApiError> {
        let logprobs = match (self.logprobs.unwrap_or(false), self.top_logprobs) {
            (true, top) => Some(sampling::top_logprobs(top.unwrap_or(0), "top_logprobs")?),
            (false, Some(_)) => {
                return Err(ApiError::invalid(
                    "top_logprobs requires logprobs to be true",
                    "top_logprobs",
                ));
            }
            (false, None) => None,
        };
        let prompt = Prompt::Chat {
            messages: messages::normalize(self.messages)?,
            tools: self.tools,
        };
        let max_tokens = self.max_completion_tokens.or(self.params.max_tokens);
        self.params.build_request(prompt, max_tokens, logprobs)
    }
}

/// Answers like `respond`, tagged with the requested model for the metrics.
pub async fn handler<B: Backend>(
    State(backend): State<Arc<B>>,
    ApiJson(body): ApiJson<ChatRequest>,
) -> Response {
    let served = served_model::resolve(backend.as_ref(), &body.params.model);
    served.attach(respond(backend, body).await)
}

async fn respond<B: Backend>(backend: Arc<B>, body: ChatRequest) -> Result<Response, ApiError> {
    let name = body.params.model.clone();
    let stream = body.params.stream();
    let include_usage = body.params.include_usage();
    let request = body.into_generate()?;
    let started = generation::start(backend.as_ref(), &name, request).await?;
    if stream {
        let chunks = ChatChunks::new(started.model);
        return Ok(sse::response(started.events, chunks, include_usage).into_response());
    }
    let model = started.model;
    let collected = generation::collect(started.events).await?;
    Ok(Json(ChatCompletion::new(model, collected)).into_response())
}
