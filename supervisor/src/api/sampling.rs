//! The request fields chat and completions share (sampling, limits, `n`, streaming), and their
//! validation into `GenerateRequest`. A field the client leaves out stays `None` there: dispatch
//! fills it in from the model's defaults (`sampling_defaults`), once the model is known.
//!
//! Validation happens here, before the backend is asked, so a bad value is a 400 that names the
//! parameter rather than a worker-side failure. Fields OpenAI defines but corral cannot honour
//! are refused with a message saying so, never silently ignored.

use corral_ipc::{GenerateRequest, Prompt, SpeculativeMethod};
use serde::Deserialize;
use serde_json::Value;

use super::error::ApiError;
use super::output_format;

/// OpenAI's limit on alternatives per token.
pub const MAX_TOP_LOGPROBS: u32 = 20;
/// OpenAI's limit on stop sequences.
pub const MAX_STOP_SEQUENCES: usize = 4;

/// Flattened into each endpoint's request; unknown fields are ignored, as OpenAI clients send
/// fields this server has no use for.
#[derive(Debug, Default, Deserialize)]
pub struct SamplingParams {
    pub model: String,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// Not OpenAI's, but common in local servers; zero or negative means off.
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Option<StopInput>,
    pub n: Option<u32>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// Checked in `output_format.rs`; kept as JSON so a bad shape is a 400 naming the field.
    pub response_format: Option<Value>,
    /// corral's extension: a grammar in llguidance's Lark dialect the output must follow.
    pub grammar: Option<String>,
    /// corral's extension: how this request guesses tokens ahead (`off`, `ngram`, `draft`,
    /// `mtp`), in place of its model's `speculative`.
    pub speculative: Option<SpeculativeMethod>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StopInput {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

impl SamplingParams {
    pub fn stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// Whether a streamed response ends with a usage chunk.
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|options| options.include_usage)
            .unwrap_or(false)
    }

    /// Validates every shared field and builds the worker request. `max_tokens` is the endpoint's
    /// own choice (chat prefers `max_completion_tokens`); `logprobs` is already validated.
    pub fn build_request(
        &self,
        prompt: Prompt,
        max_tokens: Option<u32>,
        logprobs: Option<u32>,
    ) -> Result<GenerateRequest, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::invalid(
                "only n=1 is supported: this server generates one choice per request",
                "n",
            ));
        }
        let output_format =
            output_format::parse(self.response_format.as_ref(), self.grammar.as_deref())?;
        if max_tokens == Some(0) {
            return Err(ApiError::invalid(
                "max_tokens must be at least 1",
                "max_tokens",
            ));
        }
        Ok(GenerateRequest {
            prompt,
            max_tokens,
            temperature: in_range(self.temperature, 0.0, 2.0, "temperature")?,
            top_p: in_range(self.top_p, 0.0, 1.0, "top_p")?,
            top_k: self
                .top_k
                .map(|k| u32::try_from(k.max(0)).unwrap_or(u32::MAX)),
            min_p: in_range(self.min_p, 0.0, 1.0, "min_p")?,
            repetition_penalty: repetition_penalty(self.repetition_penalty)?,
            presence_penalty: in_range(self.presence_penalty, -2.0, 2.0, "presence_penalty")?,
            frequency_penalty: in_range(self.frequency_penalty, -2.0, 2.0, "frequency_penalty")?,
            seed: self.seed,
            stop: self.stop.as_ref().map(stop_sequences).transpose()?,
            logprobs,
            tool_choice: None,
            parallel_tool_calls: None,
            output_format,
            count_only: false,
            reasoning_budget: None,
            speculative: self.speculative,
        })
    }
}

/// Checks `top_logprobs` against OpenAI's bound; shared by both endpoints' logprob fields.
pub fn top_logprobs(count: u32, param: &'static str) -> Result<u32, ApiError> {
    if count > MAX_TOP_LOGPROBS {
        return Err(ApiError::invalid(
            format!("{param} must be between 0 and {MAX_TOP_LOGPROBS}, got {count}"),
            param,
        ));
    }
    Ok(count)
}

fn in_range(
    value: Option<f32>,
    min: f32,
    max: f32,
    param: &'static str,
) -> Result<Option<f32>, ApiError> {
    match value {
        None => Ok(None),
        Some(value) if (min..=max).contains(&value) => Ok(Some(value)),
        Some(value) => Err(ApiError::invalid(
            format!("{param} must be between {min} and {max}, got {value}"),
            param,
        )),
    }
}

fn repetition_penalty(value: Option<f32>) -> Result<Option<f32>, ApiError> {
    match value {
        None => Ok(None),
        Some(value) if value > 0.0 && value.is_finite() => Ok(Some(value)),
        Some(value) => Err(ApiError::invalid(
            format!("repetition_penalty must be greater than 0, got {value}"),
            "repetition_penalty",
        )),
    }
}

fn stop_sequences(stop: &StopInput) -> Result<Vec<String>, ApiError> {
    let stop = match stop {
        StopInput::One(one) => vec![one.clone()],
        StopInput::Many(many) => many.clone(),
    };
    if stop.len() > MAX_STOP_SEQUENCES {
        return Err(ApiError::invalid(
            format!(
                "stop accepts at most {MAX_STOP_SEQUENCES} sequences, got {}",
                stop.len()
            ),
            "stop",
        ));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "stop sequences must not be empty",
            "stop",
        ));
    }
    Ok(stop)
}
