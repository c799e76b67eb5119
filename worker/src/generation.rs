//! One request's generation: tokenize, prefill, then sample and decode token by token until a
//! stop token, a stop string, `max_tokens` or cancellation.
//!
//! Runs on the engine thread and reports through a callback, so the same loop serves the one-shot
//! CLI and the supervisor's requests.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use corral_ipc::{OutputFormat, ToolCall, ToolChoice};
use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{Array, Dtype};

use crate::chat_template::ChatTemplateError;
use crate::detokenizer::Detokenizer;
use crate::loaded::LoadedModel;
use crate::model::KvCache;
use crate::prefill_guard::{self, PREFILL_CHUNK, PrefillTooLarge};
use crate::prefix_cache::PrefixCache;
use crate::sampling::{InvalidParams, SampleError, Sampler, SamplingParams, logprobs};
use crate::stop_strings::StopStrings;

#[derive(Debug, Clone)]
pub enum Prompt {
    /// Raw text, tokenized with the tokenizer's special tokens (BOS where it adds one).
    Text(String),
    /// A conversation rendered with the model's chat template.
    Chat {
        messages: Vec<serde_json::Value>,
        tools: Option<serde_json::Value>,
        /// Extra template variables (`enable_thinking`, `reasoning_effort`...).
        template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    },
    Tokens(Vec<u32>),
}

#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub prompt: Prompt,
    pub sampling: SamplingParams,
    pub max_tokens: usize,
    pub stop: Vec<String>,
    /// Report each sampled token's log-probability and this many alternatives.
    pub logprobs: Option<usize>,
    pub output: OutputOptions,
}

/// What the answer may hold besides text, and the grammar it must follow.
#[derive(Debug, Clone, Default)]
pub struct OutputOptions {
    pub tool_choice: ToolChoice,
    /// `None` lets the model's tool-call format decide.
    pub parallel_tool_calls: Option<bool>,
    pub format: Option<OutputFormat>,
}

/// A sampled token's log-probability (over the raw logits) and the most likely alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub text: String,
    pub logprob: f32,
    pub top: Vec<(u32, String, f32)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token or stop string.
    Stop,
    /// `max_tokens`, or the model's context is full.
    Length,
    Cancelled,
    /// The model ended its turn after calling tools.
    ToolCalls,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Timings {
    pub prompt_tokens: usize,
    /// Of those, restored from the prefix cache rather than prefilled.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    pub prefill: Duration,
    pub decode: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The prompt fits and generation begins.
    Accepted { prompt_tokens: usize },
    /// Text of `token_count` sampled tokens (text is held back while it may be a stop string
    /// or an incomplete character, so one delta can cover several tokens).
    Delta {
        text: String,
        reasoning: String,
        tool_calls: Vec<ToolCall>,
        token_count: usize,
        logprobs: Vec<TokenLogprob>,
    },
    Done {
        finish_reason: FinishReason,
        timings: Timings,
    },
}

/// Why a request was refused before any compute.
#[derive(Debug, thiserror::Error)]
pub enum RejectReason {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the prompt has {prompt} tokens; the model's context holds {context}")]
    PromptTooLong { prompt: usize, context: usize },
    #[error(transparent)]
    PrefillMemory(#[from] PrefillTooLarge),
    #[error("the model has no chat template; send a plain completion instead")]
    NoChatTemplate,
    #[error(transparent)]
    ChatTemplate(#[from] ChatTemplateError),
    #[error("cannot tokenize the prompt: {0}")]
    Tokenize(String),
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenOutOfRange { id: u32, vocab: usize },
    #[error(transparent)]
    Sampling(#[from] InvalidParams),
}

impl RejectReason {
    /// The request field at fault, for the API's `param`.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            RejectReason::PromptTooLong { .. } => Some("messages"),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("request refused")]
    Rejected(#[from] RejectReason),
    #[error("MLX failed")]
    Mlx(#[from] Exception),
    #[error(transparent)]
    Sample(#[from] SampleError),
    #[error("detokenizing failed: {0}")]
    Detokenize(String),
}

/// What bounds and speeds up one generation besides its request.
#[derive(Default)]
pub struct Limits<'a> {
    /// A prompt whose prefill would not fit under this is refused before any compute.
    pub memory: Option<u64>,
    /// Restores a cached prompt prefix and keeps the prompt's blocks.
    pub prefix: Option<&'a mut PrefixCache>,
}

/// Runs `request` to its end, reporting events; `cancel` is checked before each token.
pub fn generate(
    loaded: &LoadedModel,
    request: &GenerateRequest,
    limits: Limits<'_>,
    cancel: &AtomicBool,
    mut emit: impl FnMut(Event),
) -> Result<(), GenerateError> {
    let prompt = tokenize(loaded, &request.prompt)?;
    if cancel.load(Ordering::Relaxed) {
        // Cancelled while queued: nobody waits for it, so skip the prefill too.
        emit(Event::Done {
            finish_reason: FinishReason::Cancelled,
            timings: Timings {
                prompt_tokens: prompt.len(),
                cached_tokens: 0,
                completion_tokens: 0,
                prefill: Duration::ZERO,
                decode: Duration::ZERO,
            },
        });
        return Ok(());
    }
    let context = loaded.model.config.max_position_embeddings;
    if prompt.len() >= context {
        return Err(RejectReason::PromptTooLong {
            prompt: prompt.len(),
            context,
        }
        .into());
    }
    if let Some(limit) = limits.memory {
        let model = &loaded.model;
        prefill_guard::admit(&model.config, model.dtype(), prompt.len(), limit)
            .map_err(RejectReason::from)?;
    }
    let mut sampler = Sampler::new(request.sampling.clone()).map_err(RejectReason::from)?;
    emit(Event::Accepted {
        prompt_tokens: prompt.len(),
    });

    let started = Instant::now();
    let mut prefix = limits.prefix;
    let (mut cache, cached_tokens) = match prefix.as_deref_mut() {
        Some(prefix) => prefix.restore(&prompt, || loaded.model.new_cache()),
        None => (loaded.model.new_cache(), 0),
    };
    let mut logits = prefill(loaded, &prompt[cached_tokens..], &mut cache)?;
    if let Some(prefix) = prefix {
        prefix.store(&prompt, &cache);
    }
    let prefill_time = started.elapsed();

    let decode_started = Instant::now();
    let mut history = prompt.clone();
    let mut detokenizer = Detokenizer::new(loaded.tokenizer.clone());
    let mut stops = StopStrings::new(request.stop.iter().cloned());
    let max_tokens = request.max_tokens.min(context - prompt.len());
    let mut generated = 0;
    let mut pending = PendingTokens::default();
    let finish_reason = loop {
        if cancel.load(Ordering::Relaxed) {
            break FinishReason::Cancelled;
        }
        if generated >= max_tokens {
            break FinishReason::Length;
        }
        let token = sampler.sample(&logits, &history)?;
        history.push(token);
        generated += 1;
        pending.record(loaded, request.logprobs, &logits, token);
        if loaded.eos_token_ids.contains(&token) {
            break FinishReason::Stop;
        }
        let text = detokenizer
            .push(token)
            .map_err(|error| GenerateError::Detokenize(error.to_string()))?;
        let outcome = stops.push(&text);
        if !outcome.emit.is_empty() {
            emit(pending.delta(outcome.emit));
        }
        if outcome.stopped {
            break FinishReason::Stop;
        }
        if generated < max_tokens {
            logits = step(loaded, token, &mut cache)?;
        }
    };
    if finish_reason != FinishReason::Cancelled {
        // Flush what the detokenizer and the stop matcher still hold (both give nothing more
        // once a stop string has matched).
        let tail = detokenizer
            .finish()
            .map_err(|error| GenerateError::Detokenize(error.to_string()))?;
        let outcome = stops.push(&tail);
        let mut text = outcome.emit;
        if !outcome.stopped {
            text.push_str(&stops.finish());
        }
        if !text.is_empty() || pending.token_count > 0 {
            emit(pending.delta(text));
        }
    }
    emit(Event::Done {
        finish_reason,
        timings: Timings {
            prompt_tokens: prompt.len(),
            cached_tokens,
            completion_tokens: generated,
            prefill: prefill_time,
            decode: decode_started.elapsed(),
        },
    });
    Ok(())
}

/// Tokens sampled since the last delta, with their log-probabilities when asked for.
#[derive(Default)]
struct PendingTokens {
    token_count: usize,
    logprobs: Vec<TokenLogprob>,
}

impl PendingTokens {
    fn record(&mut self, loaded: &LoadedModel, top: Option<usize>, logits: &[f32], token: u32) {
        self.token_count += 1;
        let Some(top) = top else {
            return;
        };
        let text_of = |id: u32| loaded.tokenizer.decode(&[id], false).unwrap_or_default();
        let computed = logprobs(logits, token, top);
        self.logprobs.push(TokenLogprob {
            token,
            text: text_of(token),
            logprob: computed.chosen_logprob,
            top: computed
                .top
                .into_iter()
                .map(|(id, logprob)| (id, text_of(id), logprob))
                .collect(),
        });
    }

    fn delta(&mut self, text: String) -> Event {
        Event::Delta {
            text,
            reasoning: String::new(),
            tool_calls: Vec::new(),
            token_count: std::mem::take(&mut self.token_count),
            logprobs: std::mem::take(&mut self.logprobs),
        }
    }
}

pub fn tokenize(loaded: &LoadedModel, prompt: &Prompt) -> Result<Vec<u32>, RejectReason> {
    let (text, add_special_tokens) = match prompt {
        Prompt::Tokens(tokens) => {
            let vocab = loaded.model.config.vocab_size as usize;
            if let Some(&id) = tokens.iter().find(|&&id| id as usize >= vocab) {
                return Err(RejectReason::TokenOutOfRange { id, vocab });
            }
            return non_empty(tokens.clone());
        }
        Prompt::Text(text) => (text.clone(), true),
        Prompt::Chat {
            messages, tools, ..
        } => {
            let template = loaded
                .chat_template
                .as_ref()
                .ok_or(RejectReason::NoChatTemplate)?;
            // The template writes the special tokens itself, as transformers' apply_chat_template.
            (template.render(messages, tools.as_ref(), true)?, false)
        }
    };
    let encoding = loaded
        .tokenizer
        .encode(text, add_special_tokens)
        .map_err(|error| RejectReason::Tokenize(error.to_string()))?;
    non_empty(encoding.get_ids().to_vec())
}

fn non_empty(tokens: Vec<u32>) -> Result<Vec<u32>, RejectReason> {
    if tokens.is_empty() {
        return Err(RejectReason::EmptyPrompt);
    }
    Ok(tokens)
}

/// Fills the cache with the prompt; returns the logits after its last token.
fn prefill(
    loaded: &LoadedModel,
    prompt: &[u32],
    cache: &mut [KvCache],
) -> Result<Vec<f32>, Exception> {
    let mut chunks = prompt.chunks(PREFILL_CHUNK).peekable();
    while let Some(chunk) = chunks.next() {
        let hidden = loaded.model.hidden_states(chunk, cache)?;
        if chunks.peek().is_some() {
            // Evaluating the chunk's output writes its keys and values into the cache.
            hidden.eval()?;
            continue;
        }
        let last = hidden.index((.., -1.., ..));
        return host_logits(&loaded.model.logits(&last)?);
    }
    Ok(Vec::new())
}

fn step(loaded: &LoadedModel, token: u32, cache: &mut [KvCache]) -> Result<Vec<f32>, Exception> {
    let hidden = loaded.model.hidden_states(&[token], cache)?;
    host_logits(&loaded.model.logits(&hidden)?)
}

fn host_logits(logits: &Array) -> Result<Vec<f32>, Exception> {
    let logits = logits.as_dtype(Dtype::Float32)?;
    logits.eval()?;
    Ok(logits.as_slice::<f32>().to_vec())
}
