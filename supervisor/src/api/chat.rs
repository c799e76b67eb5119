//! `POST /v1/chat/completions`: the request, its validation into a worker request, and the
//! handler. The response shapes live in `chat_response.rs`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use corral_ipc::{GenerateRequest, Prompt};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::backend::Backend;
use super::chat_response::{ChatChunks, ChatCompletion};
use super::error::ApiError;
use super::extract::ApiJson;
use super::generation;
use super::images::{self, ImageFetch, Pending};
use super::messages;
use super::sampling::{self, SamplingParams};
use super::served_model;
use super::sse;
use super::tools::Tools;

/// OpenAI's reasoning efforts. They reach the template as `reasoning_effort`, and set
/// `enable_thinking` for templates that read it: `none` turns thinking off (Qwen3's is on by
/// default), any other effort on (Gemma 4's is off by default).
const REASONING_EFFORTS: [&str; 6] = ["none", "minimal", "low", "medium", "high", "xhigh"];

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
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    /// Extra variables for the chat template, as vLLM and SGLang take them.
    pub chat_template_kwargs: Option<Map<String, Value>>,
    pub reasoning_effort: Option<String>,
}

impl ChatRequest {
    /// The worker request, and its images still to fetch.
    fn into_generate(self) -> Result<(GenerateRequest, Vec<Pending>), ApiError> {
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
        let tools = Tools::check(self.tools.unwrap_or_default())?;
        // `None` leaves the choice to the model's default (`sampling_defaults`).
        let tool_choice = match self.tool_choice.as_ref().filter(|choice| !choice.is_null()) {
            Some(choice) => Some(tools.choice(Some(choice))?),
            None => None,
        };
        let template_kwargs = template_kwargs(self.chat_template_kwargs, self.reasoning_effort)?;
        let normalized = messages::normalize(self.messages)?;
        let prompt = Prompt::Chat {
            messages: normalized.messages,
            tools: (!tools.tools.is_empty()).then_some(tools.tools),
            template_kwargs,
            images: Vec::new(),
        };
        let max_tokens = self.max_completion_tokens.or(self.params.max_tokens);
        let mut request = self.params.build_request(prompt, max_tokens, logprobs)?;
        request.tool_choice = tool_choice;
        request.parallel_tool_calls = self.parallel_tool_calls;
        Ok((request, normalized.images))
    }
}

/// The template's extra variables: the client's, plus `reasoning_effort` where the client did
/// not set the variables it implies itself.
pub fn template_kwargs(
    kwargs: Option<Map<String, Value>>,
    effort: Option<String>,
) -> Result<Option<Map<String, Value>>, ApiError> {
    let Some(effort) = effort else {
        return Ok(kwargs);
    };
    if !REASONING_EFFORTS.contains(&effort.as_str()) {
        return Err(ApiError::invalid(
            format!(
                "reasoning_effort `{effort}` is not one of {}",
                REASONING_EFFORTS.join(", ")
            ),
            "reasoning_effort",
        ));
    }
    let mut kwargs = kwargs.unwrap_or_default();
    kwargs
        .entry("enable_thinking")
        .or_insert(Value::Bool(effort != "none"));
    kwargs
        .entry("reasoning_effort")
        .or_insert(Value::String(effort));
    Ok(Some(kwargs))
}

/// Answers like `respond`, tagged with the requested model for the metrics.
pub async fn handler<B: Backend>(
    State(backend): State<Arc<B>>,
    Extension(fetch): Extension<Arc<ImageFetch>>,
    ApiJson(body): ApiJson<ChatRequest>,
) -> Response {
    let served = served_model::resolve(backend.as_ref(), &body.params.model);
    served.attach(respond(backend, &fetch, body).await)
}

async fn respond<B: Backend>(
    backend: Arc<B>,
    fetch: &ImageFetch,
    body: ChatRequest,
) -> Result<Response, ApiError> {
    let name = body.params.model.clone();
    let stream = body.params.stream();
    let include_usage = body.params.include_usage();
    let (mut request, pending) = body.into_generate()?;
    images::attach(fetch, &mut request, pending).await?;
    let started = generation::start(backend.as_ref(), &name, request).await?;
    if stream {
        let chunks = ChatChunks::new(started.model);
        return Ok(sse::response(started.events, chunks, include_usage).into_response());
    }
    let model = started.model;
    let collected = generation::collect(started.events).await?;
    Ok(Json(ChatCompletion::new(model, collected)).into_response())
}
