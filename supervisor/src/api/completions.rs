//! `POST /v1/completions`: the legacy text completion endpoint, its prompt forms (a string, or
//! token ids, alone or in a one-element batch), and its `text_completion` response and chunks.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use corral_ipc::{FinishReason, GenerateRequest, Prompt, TokenLogprob, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::backend::Backend;
use super::error::ApiError;
use super::extract::ApiJson;
use super::generation::{self, Collected};
use super::logprobs::{self, CompletionLogprobs};
use super::sampling::{self, SamplingParams};
use super::served_model;
use super::sse::{self, ChunkFormat, Generated};
use super::types::{UsageBody, finish_reason, response_id, unix_now};

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    #[serde(flatten)]
    pub params: SamplingParams,
    pub prompt: Value,
    /// Here an alternatives count, not chat's boolean.
    pub logprobs: Option<u32>,
    pub echo: Option<bool>,
}

impl CompletionRequest {
    fn into_generate(self) -> Result<GenerateRequest, ApiError> {
        if self.echo == Some(true) {
            return Err(ApiError::invalid("echo is not supported", "echo"));
        }
        let logprobs = self
            .logprobs
            .map(|count| sampling::top_logprobs(count, "logprobs"))
            .transpose()?;
        let prompt = prompt(self.prompt)?;
        let max_tokens = self.params.max_tokens;
        self.params.build_request(prompt, max_tokens, logprobs)
    }
}

/// A batch of prompts would need one choice per prompt; like `n`, only one is supported.
fn prompt(value: Value) -> Result<Prompt, ApiError> {
    let invalid = |message: &str| ApiError::invalid(message, "prompt");
    match value {
        Value::String(text) => Ok(Prompt::Text(text)),
        Value::Array(mut items) => match items.as_slice() {
            [] => Err(invalid("prompt must not be empty")),
            [Value::String(_)] | [Value::Array(_)] => prompt(items.remove(0)),
            [Value::Number(_), ..] => token_ids(&items).map(Prompt::Tokens),
            [Value::String(_) | Value::Array(_), ..] => Err(invalid(
                "only one prompt per request is supported; send one string or one token array",
            )),
            _ => Err(invalid("prompt must be a string, or an array of token ids")),
        },
        _ => Err(invalid("prompt must be a string, or an array of token ids")),
    }
}

fn token_ids(items: &[Value]) -> Result<Vec<u32>, ApiError> {
    items
        .iter()
        .map(|item| {
            item.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| ApiError::invalid("token ids must be integers in 0..2^32", "prompt"))
        })
        .collect()
}

/// Answers like `respond`, tagged with the requested model for the metrics.
pub async fn handler<B: Backend>(
    State(backend): State<Arc<B>>,
    ApiJson(body): ApiJson<CompletionRequest>,
) -> Response {
    let served = served_model::resolve(backend.as_ref(), &body.params.model);
    served.attach(respond(backend, body).await)
}

async fn respond<B: Backend>(
    backend: Arc<B>,
    body: CompletionRequest,
) -> Result<Response, ApiError> {
    let name = body.params.model.clone();
    let stream = body.params.stream();
    let include_usage = body.params.include_usage();
    let request = body.into_generate()?;
    let started = generation::start(backend.as_ref(), &name, request).await?;
    let mut chunks = CompletionChunks::new(started.model);
    if stream {
        return Ok(sse::response(started.events, chunks, include_usage).into_response());
    }
    let collected = generation::collect(started.events).await?;
    Ok(Json(chunks.whole(collected)).into_response())
}

/// A whole completion and a streamed chunk share this shape; a usage-only chunk has no choices.
#[derive(Debug, Serialize)]
struct TextCompletion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<TextChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageBody>,
}

#[derive(Debug, Serialize)]
struct TextChoice {
    index: u32,
    text: String,
    logprobs: Option<CompletionLogprobs>,
    finish_reason: Option<&'static str>,
}

struct CompletionChunks {
    id: String,
    created: u64,
    model: String,
    /// Character offset of the next token in the generated text, for `text_offset`.
    offset: usize,
}

impl CompletionChunks {
    fn new(model: String) -> Self {
        CompletionChunks {
            id: response_id("cmpl"),
            created: unix_now(),
            model,
            offset: 0,
        }
    }

    fn body(&self, choices: Vec<TextChoice>, usage: Option<UsageBody>) -> TextCompletion<'_> {
        TextCompletion {
            id: &self.id,
            object: "text_completion",
            created: self.created,
            model: &self.model,
            choices,
            usage,
        }
    }

    fn choice(
        &mut self,
        text: String,
        tokens: Option<&[TokenLogprob]>,
        finish: Option<FinishReason>,
    ) -> Vec<TextChoice> {
        let logprobs = tokens.map(|tokens| logprobs::completion(tokens, &mut self.offset));
        vec![TextChoice {
            index: 0,
            text,
            logprobs,
            finish_reason: finish.map(finish_reason),
        }]
    }

    fn whole(&mut self, collected: Collected) -> TextCompletion<'_> {
        let choices = self.choice(
            collected.text,
            collected.logprobs.as_deref(),
            Some(collected.finish_reason),
        );
        self.body(choices, Some(collected.usage.into()))
    }
}

impl ChunkFormat for CompletionChunks {
    fn opening(&mut self) -> Vec<Result<Event, axum::Error>> {
        Vec::new()
    }

    /// A text prompt gets no reasoning or tool-call parsing, so only the text counts.
    fn delta(&mut self, delta: Generated) -> Vec<Result<Event, axum::Error>> {
        let choices = self.choice(delta.text, delta.logprobs.as_deref(), None);
        vec![Event::default().json_data(self.body(choices, None))]
    }

    fn finish(&mut self, reason: FinishReason) -> Result<Event, axum::Error> {
        let choices = self.choice(String::new(), None, Some(reason));
        Event::default().json_data(self.body(choices, None))
    }

    fn usage(&mut self, usage: Usage) -> Result<Event, axum::Error> {
        Event::default().json_data(self.body(Vec::new(), Some(usage.into())))
    }
}
