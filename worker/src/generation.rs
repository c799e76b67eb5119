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
use crate::constraint::{Constraint, ConstraintError, GrammarSpec, ToolCallChoice};
use crate::loaded::LoadedModel;
use crate::model::KvCache;
use crate::output::{Output, Parts};
use crate::prefill_guard::{self, PREFILL_CHUNK, PrefillTooLarge};
use crate::prefix_cache::PrefixCache;
use crate::sampling::{InvalidParams, SampleError, Sampler, SamplingParams, logprobs};
use crate::tools::{OutputParser, ParserConfig, ReasoningStart, prompt_opens_reasoning};
use crate::tools::{ToolFormat, mistral_call_ids, rewrite_messages};

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
    /// Only count the prompt's tokens: accept, then finish with no compute.
    pub count_only: bool,
}

/// What the answer may hold besides text, and the grammar it must follow.
#[derive(Debug, Clone, Default)]
pub struct OutputOptions {
    pub tool_choice: ToolChoice,
    /// `None` lets the model's tool-call format decide.
    pub parallel_tool_calls: Option<bool>,
    pub format: Option<OutputFormat>,
    /// Thinking tokens allowed before the worker closes the reasoning block itself.
    pub reasoning_budget: Option<usize>,
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
        /// The stop string that ended the answer, when one did.
        stop_sequence: Option<String>,
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
    /// The schema, grammar or tools to constrain the output with were refused.
    #[error("{error}")]
    Constraint {
        param: &'static str,
        error: ConstraintError,
    },
    #[error(
        "this model writes tool calls in the {format:?} format, which holds one call per turn; \
         send parallel_tool_calls: false"
    )]
    ParallelCalls { format: ToolFormat },
}

impl RejectReason {
    /// The request field at fault, for the API's `param`.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            RejectReason::PromptTooLong { .. } => Some("messages"),
            RejectReason::Constraint { param, .. } => Some(param),
            RejectReason::ParallelCalls { .. } => Some("parallel_tool_calls"),
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
    #[error(transparent)]
    Constraint(#[from] ConstraintError),
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
    let prepared = prepare(loaded, request)?;
    let prompt = prepared.tokens;
    if request.count_only {
        emit(Event::Accepted {
            prompt_tokens: prompt.len(),
        });
        emit(done_without_compute(FinishReason::Stop, prompt.len()));
        return Ok(());
    }
    if cancel.load(Ordering::Relaxed) {
        // Cancelled while queued: nobody waits for it, so skip the prefill too.
        emit(done_without_compute(FinishReason::Cancelled, prompt.len()));
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
    let mut constraint = prepared.constraint;
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
    let mut output = Output::new(
        loaded.tokenizer.clone(),
        &loaded.formats.kept_tokens,
        &request.stop,
        prepared.parser,
    );
    let mut budget = ThinkingBudget::new(
        loaded,
        request
            .output
            .reasoning_budget
            .filter(|_| constraint.is_none()),
    );
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
        let token = match budget.next_forced() {
            Some(token) => token,
            None => {
                if let Some(constraint) = constraint.as_mut() {
                    // Logprobs then describe the distribution the token was drawn from.
                    constraint.mask(&mut logits)?;
                }
                sampler.sample(&logits, &history)?
            }
        };
        history.push(token);
        generated += 1;
        pending.record(loaded, request.logprobs, &logits, token);
        if loaded.eos_token_ids.contains(&token) {
            break FinishReason::Stop;
        }
        if let Some(constraint) = constraint.as_mut() {
            constraint.accept(token)?;
        }
        let step = output
            .push(token)
            .map_err(|error| GenerateError::Detokenize(error.to_string()))?;
        if !step.parts.is_empty() {
            emit(pending.delta(step.parts));
        }
        budget.count(output.in_reasoning());
        let grammar_complete = constraint.as_ref().is_some_and(Constraint::is_finished);
        let last_call_made = prepared.single_call && output.calls() > 0;
        if step.stopped || grammar_complete || last_call_made {
            break FinishReason::Stop;
        }
        if generated < max_tokens {
            logits = step_logits(loaded, token, &mut cache)?;
        }
    };
    if finish_reason != FinishReason::Cancelled {
        let parts = output
            .finish()
            .map_err(|error| GenerateError::Detokenize(error.to_string()))?;
        if !parts.is_empty() || pending.token_count > 0 {
            emit(pending.delta(parts));
        }
    }
    let finish_reason = match finish_reason {
        // The turn ended after calls: the client is to run them.
        FinishReason::Stop if output.calls() > 0 => FinishReason::ToolCalls,
        other => other,
    };
    emit(Event::Done {
        finish_reason,
        stop_sequence: output.stop_sequence().map(str::to_owned),
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

/// A limit on thinking: once the model has thought for its budget without closing its
/// reasoning block, the block's closing text is fed to it as if it had written it, and the
/// answer follows. Under a grammar the grammar alone decides, so there is no budget then.
struct ThinkingBudget {
    /// Thinking tokens still allowed; `None` when there is no budget or it was spent.
    left: Option<usize>,
    close: Vec<u32>,
    forced: std::collections::VecDeque<u32>,
}

/// What closes a Qwen3- or DeepSeek-R1-style reasoning block, as those templates write it.
const CLOSE_REASONING: &str = "\n</think>\n\n";

impl ThinkingBudget {
    fn new(loaded: &LoadedModel, budget: Option<usize>) -> Self {
        let close = match budget {
            Some(_) => match loaded.tokenizer.encode(CLOSE_REASONING, false) {
                Ok(encoding) => encoding.get_ids().to_vec(),
                Err(error) => {
                    tracing::warn!(%error, "cannot tokenize the end of reasoning; no thinking budget");
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        Self {
            left: budget.filter(|_| !close.is_empty()),
            close,
            forced: std::collections::VecDeque::new(),
        }
    }

    /// The next token to feed instead of sampling, while the closing text is being fed.
    fn next_forced(&mut self) -> Option<u32> {
        self.forced.pop_front()
    }

    /// Counts a token the model wrote while `thinking`; at the budget, queues the closing text.
    fn count(&mut self, thinking: bool) {
        let Some(left) = self.left.as_mut().filter(|_| thinking) else {
            return;
        };
        *left = left.saturating_sub(1);
        if *left == 0 {
            self.forced.extend(self.close.iter().copied());
            self.left = None;
        }
    }
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

    fn delta(&mut self, parts: Parts) -> Event {
        Event::Delta {
            text: parts.text,
            reasoning: parts.reasoning,
            tool_calls: parts.tool_calls,
            token_count: std::mem::take(&mut self.token_count),
            logprobs: std::mem::take(&mut self.logprobs),
        }
    }
}

/// The end of a request that ran nothing: a count, or one cancelled before its prefill.
fn done_without_compute(finish_reason: FinishReason, prompt_tokens: usize) -> Event {
    Event::Done {
        finish_reason,
        stop_sequence: None,
        timings: Timings {
            prompt_tokens,
            cached_tokens: 0,
            completion_tokens: 0,
            prefill: Duration::ZERO,
            decode: Duration::ZERO,
        },
    }
}

/// A request made ready to run: its tokens, how its output is read, and the grammar it must
/// follow, all decided before any compute.
struct Prepared {
    tokens: Vec<u32>,
    /// `None` for text completions, whose output is all text.
    parser: Option<OutputParser>,
    constraint: Option<Constraint>,
    /// The answer ends with its first call (`parallel_tool_calls: false`).
    single_call: bool,
}

fn prepare(loaded: &LoadedModel, request: &GenerateRequest) -> Result<Prepared, RejectReason> {
    let options = &request.output;
    let format = loaded.formats.tool_format;
    let plain = |tokens| {
        Ok(Prepared {
            tokens,
            parser: None,
            constraint: output_constraint(loaded, options.format.as_ref())?,
            single_call: false,
        })
    };
    let (messages, tools, template_kwargs) = match &request.prompt {
        Prompt::Chat {
            messages,
            tools,
            template_kwargs,
        } => (messages, tools, template_kwargs),
        // With the tokenizer's special tokens: BOS where it adds one.
        Prompt::Text(text) => return plain(encode(loaded, text, true)?),
        Prompt::Tokens(tokens) => return plain(checked_tokens(loaded, tokens)?),
    };
    let offered: &[serde_json::Value] = match (&options.tool_choice, tools) {
        (ToolChoice::None, _) | (_, None) => &[],
        (_, Some(tools)) => tools.as_array().map_or(&[], Vec::as_slice),
    };
    if !offered.is_empty()
        && options.parallel_tool_calls == Some(true)
        && !format.supports_parallel()
    {
        return Err(RejectReason::ParallelCalls { format });
    }
    let text = render(loaded, messages, offered, template_kwargs.as_ref())?;
    let reasoning = if loaded.formats.reasoning {
        prompt_opens_reasoning(&text)
    } else {
        ReasoningStart::Off
    };
    let parallel = options
        .parallel_tool_calls
        .unwrap_or(format.supports_parallel());
    let forced = match &options.tool_choice {
        ToolChoice::Required => Some(ToolCallChoice::Required),
        ToolChoice::Function { name } => Some(ToolCallChoice::Named(name.clone())),
        ToolChoice::Auto | ToolChoice::None => None,
    };
    let constraint = match forced {
        Some(choice) if !offered.is_empty() => {
            let spec = GrammarSpec::ToolCalls {
                format,
                tools: offered.to_vec(),
                choice,
                parallel,
            };
            Some(compile(loaded, &spec, "tool_choice")?)
        }
        _ => output_constraint(loaded, options.format.as_ref())?,
    };
    let parser = OutputParser::new(ParserConfig {
        format,
        parse_tools: !offered.is_empty(),
        reasoning,
        tools: offered,
    });
    Ok(Prepared {
        // The template writes the special tokens itself, as transformers' apply_chat_template.
        tokens: encode(loaded, &text, false)?,
        parser: Some(parser),
        constraint,
        single_call: !offered.is_empty() && !parallel,
    })
}

/// The conversation as the model's template writes it. A template that does not render tools
/// gets them, and the conversation's past calls and results, as plain messages in the Hermes
/// format, which the output parser then reads.
fn render(
    loaded: &LoadedModel,
    messages: &[serde_json::Value],
    tools: &[serde_json::Value],
    template_kwargs: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<String, RejectReason> {
    let template = loaded
        .chat_template
        .as_ref()
        .ok_or(RejectReason::NoChatTemplate)?;
    let mentions_tools = |message: &serde_json::Value| {
        message.get("role").and_then(|role| role.as_str()) == Some("tool")
            || message.get("tool_calls").is_some()
    };
    let taught =
        !loaded.formats.native_tools && (!tools.is_empty() || messages.iter().any(mentions_tools));
    let mistral_ids;
    let messages = if loaded.formats.tool_format == ToolFormat::Mistral {
        mistral_ids = mistral_call_ids(messages);
        &mistral_ids[..]
    } else {
        messages
    };
    Ok(if taught {
        template.render_with(
            &rewrite_messages(messages, tools),
            None,
            true,
            template_kwargs,
        )?
    } else {
        let tools = (!tools.is_empty()).then(|| serde_json::Value::from(tools.to_vec()));
        template.render_with(messages, tools.as_ref(), true, template_kwargs)?
    })
}

fn output_constraint(
    loaded: &LoadedModel,
    format: Option<&OutputFormat>,
) -> Result<Option<Constraint>, RejectReason> {
    let (spec, param) = match format {
        None => return Ok(None),
        Some(OutputFormat::JsonObject) => (GrammarSpec::JsonObject, "response_format"),
        Some(OutputFormat::JsonSchema { schema, strict }) => (
            GrammarSpec::JsonSchema {
                schema: schema.clone(),
                strict: *strict,
            },
            "response_format",
        ),
        Some(OutputFormat::Lark { grammar }) => (GrammarSpec::Lark(grammar.clone()), "grammar"),
    };
    compile(loaded, &spec, param).map(Some)
}

fn compile(
    loaded: &LoadedModel,
    spec: &GrammarSpec,
    param: &'static str,
) -> Result<Constraint, RejectReason> {
    loaded
        .constraints()
        .and_then(|factory| Constraint::compile(factory, spec))
        .map_err(|error| RejectReason::Constraint { param, error })
}

/// A pre-tokenized prompt, checked against the vocabulary.
fn checked_tokens(loaded: &LoadedModel, tokens: &[u32]) -> Result<Vec<u32>, RejectReason> {
    let vocab = loaded.model.config.vocab_size as usize;
    if let Some(&id) = tokens.iter().find(|&&id| id as usize >= vocab) {
        return Err(RejectReason::TokenOutOfRange { id, vocab });
    }
    non_empty(tokens.to_vec())
}

fn encode(loaded: &LoadedModel, text: &str, special: bool) -> Result<Vec<u32>, RejectReason> {
    let encoding = loaded
        .tokenizer
        .encode(text, special)
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

fn step_logits(
    loaded: &LoadedModel,
    token: u32,
    cache: &mut [KvCache],
) -> Result<Vec<f32>, Exception> {
    let hidden = loaded.model.hidden_states(&[token], cache)?;
    host_logits(&loaded.model.logits(&hidden)?)
}

fn host_logits(logits: &Array) -> Result<Vec<f32>, Exception> {
    let logits = logits.as_dtype(Dtype::Float32)?;
    logits.eval()?;
    Ok(logits.as_slice::<f32>().to_vec())
}
