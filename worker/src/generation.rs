//! A generation request, its events and errors, and what is decided before any compute:
//! render the template, tokenize, compile the grammar (`prepare`).
//!
//! The running itself is the batch's (`batch.rs`, `sequence.rs`), which imports this file; the
//! one-shot CLI runs a request through a batch of its own (`one_shot.rs`).

use std::time::Duration;

use corral_ipc::{OutputFormat, PromptImage, ToolCall, ToolChoice};
use mlx_rs::error::Exception;

use crate::chat_template::ChatTemplateError;
use crate::constraint::{Constraint, ConstraintError, GrammarSpec, ToolCallChoice};
use crate::loaded::LoadedModel;
use crate::prefill_guard::PrefillTooLarge;
use crate::prompt_images::{ImageLimits, ImagePrompt, ImagePromptError, refuse_images};
use crate::sampling::{InvalidParams, SampleError, SamplingParams};
use crate::speculation::Method;
use crate::system_reminder;
use crate::tools::{OutputParser, ParserConfig, ReasoningStart, prompt_opens_reasoning};
use crate::tools::{
    ToolFormat, deepseek_messages, deepseek_thinking, gemma4_tool_responses, kimi_call_ids,
    mistral_call_ids, phi4_messages, rewrite_messages,
};

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
        /// `images[n]` is the n-th `{"type": "image"}` content part of `messages`.
        images: Vec<PromptImage>,
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
    /// How this request guesses ahead, in place of the model's way.
    pub speculative: Option<Method>,
}

impl GenerateRequest {
    /// `prompt` answered greedily (temperature 0) up to `max_tokens`, with nothing else asked:
    /// the reproducible request that tests and benches compare runs with.
    pub fn greedy(prompt: Prompt, max_tokens: usize) -> Self {
        Self {
            prompt,
            sampling: SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            },
            max_tokens,
            stop: Vec::new(),
            logprobs: None,
            output: OutputOptions::default(),
            count_only: false,
            speculative: None,
        }
    }
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
    /// Where the prompt parted from what the prefix cache held, when it could tell.
    pub diverged_at: Option<usize>,
    pub completion_tokens: usize,
    pub prefill: Duration,
    pub decode: Duration,
    /// The prompt's images the vision tower encoded (not those it had encoded before), and the
    /// time it took on them, within `prefill`.
    pub images_encoded: usize,
    pub image_encode: Duration,
    /// Tokens guessed ahead (speculative decoding), and of those the ones the model confirmed.
    pub drafted: usize,
    pub accepted: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The prompt fits and generation begins, `cached_tokens` of it restored from the prefix
    /// cache.
    Accepted {
        prompt_tokens: usize,
        cached_tokens: usize,
    },
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
    /// A chat's images refused: too many, one the model cannot take or the worker cannot read.
    #[error(transparent)]
    Images(#[from] ImagePromptError),
    #[error("speculative = \"{}\" is not available: {missing}", method.name())]
    Speculation {
        method: Method,
        missing: &'static str,
    },
}

impl RejectReason {
    /// The request field at fault, for the API's `param`.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            RejectReason::PromptTooLong { .. } => Some("messages"),
            RejectReason::Constraint { param, .. } => Some(param),
            RejectReason::ParallelCalls { .. } => Some("parallel_tool_calls"),
            RejectReason::Speculation { .. } => Some("speculative"),
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

/// A request made ready to run: its tokens, how its output is read, and the grammar it must
/// follow, all decided before any compute.
pub(crate) struct Prepared {
    pub(crate) tokens: Vec<u32>,
    /// `None` for text completions, whose output is all text.
    pub(crate) parser: Option<OutputParser>,
    pub(crate) constraint: Option<Constraint>,
    /// The answer ends with its first call (`parallel_tool_calls: false`).
    pub(crate) single_call: bool,
    /// The prompt's images and the positions they give its tokens, where it has any.
    pub(crate) images: Option<ImagePrompt>,
}

pub(crate) fn prepare(
    loaded: &LoadedModel,
    request: &GenerateRequest,
    image_limits: &ImageLimits,
) -> Result<Prepared, RejectReason> {
    let options = &request.output;
    let format = loaded.formats.tool_format;
    let plain = |tokens| {
        Ok(Prepared {
            tokens,
            parser: None,
            constraint: output_constraint(loaded, options.format.as_ref())?,
            single_call: false,
            images: None,
        })
    };
    let (messages, tools, template_kwargs, images) = match &request.prompt {
        Prompt::Chat {
            messages,
            tools,
            template_kwargs,
            images,
        } => {
            refuse_images(loaded, images, image_limits)?;
            (messages, tools, template_kwargs, images)
        }
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
        prompt_opens_reasoning(&text, format.thinking_markers())
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
    let forced_call = forced.is_some() && !offered.is_empty();
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
    // A forced call's or a JSON answer's grammar binds the output from its first token. Where
    // the prompt opened the model's thinking (Qwen3.5's and DeepSeek-R1's templates end with
    // `<think>\n`), the block is closed as those templates close it with thinking off, so the
    // answer is not taken for thinking. A raw `grammar` spells the whole output, thinking too.
    let answer_bound = forced_call
        || matches!(
            options.format,
            Some(OutputFormat::JsonObject | OutputFormat::JsonSchema { .. })
        );
    let (text, reasoning) = match (answer_bound, reasoning) {
        (true, ReasoningStart::Inside) => {
            let close = format.thinking_markers().1;
            (format!("{text}\n{close}\n\n"), ReasoningStart::Off)
        }
        _ => (text, reasoning),
    };
    let parser = OutputParser::new(ParserConfig {
        format,
        parse_tools: !offered.is_empty(),
        reasoning,
        tools: offered,
    });
    // The template writes the special tokens itself, as transformers' apply_chat_template.
    let (tokens, images) = match (&loaded.model.vision, images.is_empty()) {
        (Some(tower), false) => {
            let widened = ImagePrompt::widen(loaded, &text, images, image_limits)?;
            let tokens = encode(loaded, &widened.text, false)?;
            let placed = ImagePrompt::lay_out(tower, &tokens, widened)?;
            (tokens, Some(placed))
        }
        _ => (encode(loaded, &text, false)?, None),
    };
    Ok(Prepared {
        tokens,
        parser: Some(parser),
        constraint,
        single_call: !offered.is_empty() && !parallel,
        images,
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
    // OpenAI's `developer` role (Codex sends its instructions so) is the system role to a
    // template that does not know it (Qwen3.6's raises on it).
    let as_system = (!template.source().contains("developer"))
        .then(|| system_reminder::developer_as_system(messages))
        .flatten();
    let messages = as_system.as_deref().unwrap_or(messages);
    let format = loaded.formats.tool_format;
    // DeepSeek's templates write its calls and results but not the tools, which are described
    // in its own words (`deepseek_messages`).
    let deepseek = matches!(format, ToolFormat::DeepSeekV31 | ToolFormat::DeepSeekV3);
    // Phi-4-mini's released template takes the tools in its system message (`phi4_messages`).
    let phi4 = format == ToolFormat::Phi4Mini && !loaded.formats.native_tools;
    let taught = !loaded.formats.native_tools
        && !deepseek
        && !phi4
        && (!tools.is_empty() || messages.iter().any(mentions_tools));
    let rewritten;
    let messages = match format {
        ToolFormat::Mistral | ToolFormat::MistralArgs | ToolFormat::MistralThink => {
            rewritten = mistral_call_ids(messages);
            &rewritten[..]
        }
        ToolFormat::Gemma4 => {
            rewritten = gemma4_tool_responses(messages);
            &rewritten[..]
        }
        ToolFormat::Kimi => {
            rewritten = kimi_call_ids(messages);
            &rewritten[..]
        }
        ToolFormat::DeepSeekV31 | ToolFormat::DeepSeekV3 => {
            let describe = !loaded.formats.native_tools;
            rewritten = deepseek_messages(messages, tools, format, describe);
            &rewritten[..]
        }
        ToolFormat::Phi4Mini if phi4 => {
            rewritten = phi4_messages(messages, tools);
            &rewritten[..]
        }
        _ => messages,
    };
    let deepseek_kwargs = deepseek_thinking(format, template_kwargs);
    let template_kwargs = deepseek_kwargs.as_ref().or(template_kwargs);
    let render_as_given = |messages: &[serde_json::Value]| {
        if taught {
            template.render_with(
                &rewrite_messages(messages, tools),
                None,
                true,
                template_kwargs,
            )
        } else {
            let tools = (!tools.is_empty()).then(|| serde_json::Value::from(tools.to_vec()));
            template.render_with(messages, tools.as_ref(), true, template_kwargs)
        }
    };
    match render_as_given(messages) {
        Ok(text) => Ok(text),
        // A template that refuses a system message past the start gets it as a marked user
        // turn, in place (see `system_reminder`).
        Err(refused) => match system_reminder::as_user_turns(messages) {
            Some(rewritten) => Ok(render_as_given(&rewritten)?),
            None => Err(refused.into()),
        },
    }
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
