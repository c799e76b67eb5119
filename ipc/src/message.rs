//! The protocol values exchanged between the supervisor and a worker.
//!
//! There are exactly two message enums, one per direction ([`ToWorker`], [`FromWorker`]), so
//! each side's reader and writer are typed and a message can never be sent the wrong way.
//!
//! Every request carries a `u64` id chosen by the supervisor, because one connection multiplexes
//! many concurrent generations and every worker answer must name the request it belongs to.
//!
//! Compatibility: frames are MessagePack with field *names* (`rmp_serde::to_vec_named`), never
//! positional arrays. A new `Option` field can therefore be added to any struct or struct
//! variant without a version bump: older peers ignore the unknown name and newer peers read a
//! missing one as `None`. Anything else (a new variant, a removed or retyped field) bumps
//! [`PROTOCOL_VERSION`]. `Hello`, `Welcome` and `Refused` must keep their shape across versions,
//! since they are how a version mismatch gets reported at all.

use serde::{Deserialize, Serialize};

/// The version both sides must speak; checked once, in the handshake.
pub const PROTOCOL_VERSION: u32 = 4;

/// Supervisor → worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToWorker {
    /// The handshake succeeded; the worker may load its model.
    Welcome,
    /// The handshake failed; the supervisor closes the connection after this frame.
    Refused {
        message: String,
    },
    Generate {
        id: u64,
        request: Box<GenerateRequest>,
    },
    /// Embed texts with an embedding model's worker; answered by `Embeddings` or `Rejected`
    /// (or `Error`, should the compute fail).
    Embed {
        id: u64,
        request: EmbedRequest,
    },
    /// Score documents against a query with a rerank model's worker; answered by `Scores` or
    /// `Rejected` (or `Error`).
    Rerank {
        id: u64,
        request: RerankRequest,
    },
    /// Stop request `id` at the next token boundary; the worker still ends it with `Done`
    /// (`FinishReason::Cancelled`) so the supervisor knows when the sequence is really gone.
    Cancel {
        id: u64,
    },
    GetStats,
    /// Finish or cancel every sequence, free caches, flush the SSD writer and exit 0.
    Shutdown,
}

/// Worker → supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromWorker {
    /// The first frame on every connection. `token` is the one-time token the supervisor passed
    /// at spawn; `pid` is checked against the socket's peer credentials.
    Hello {
        protocol_version: u32,
        pid: u32,
        token: String,
    },
    /// The model is loaded and the worker accepts `Generate`.
    Ready {
        load_time_ms: u64,
        weight_bytes: u64,
        context_length: u32,
        /// A display string, not a `PathBuf`: it is only logged, and a non-UTF-8 path must not
        /// make the frame fail to encode.
        model_dir: String,
    },
    /// The model could not be loaded; the worker exits after this frame.
    LoadFailed {
        message: String,
        /// The model's files can never load as they are (a bad config, an unsupported
        /// architecture or tensor type, a missing or mis-shaped tensor, a malformed file), so no
        /// retry can help; `false` for a failure that may pass (memory, I/O) and from a worker
        /// that does not say.
        #[serde(default)]
        permanent: bool,
    },
    /// The request passed validation and the prefill memory guard; the supervisor picks its
    /// HTTP status only after this or `Rejected`.
    Accepted {
        id: u64,
        prompt_tokens: u32,
        /// Of those, restored from the prefix cache (Anthropic's stream reports it first
        /// thing); `None` from a worker that does not say.
        #[serde(default)]
        cached_tokens: Option<u32>,
    },
    Rejected {
        id: u64,
        kind: RejectKind,
        message: String,
        /// The request field at fault, when one is (`tools`, `response_format`...), for the
        /// `param` of the API's error.
        #[serde(default)]
        param: Option<String>,
        /// For `PromptTooLong` on a generation: the numbers, which each API words its own way
        /// (Claude Code looks for Anthropic's `prompt is too long: N tokens > M maximum`).
        #[serde(default)]
        overflow: Option<ContextOverflow>,
    },
    Delta {
        id: u64,
        /// The answer's text (outside reasoning and tool calls).
        text: String,
        /// Thinking text, for models that think before they answer.
        #[serde(default)]
        reasoning: String,
        /// Tool calls completed by this delta, whole: a call is parsed and checked before any of
        /// it is sent, so a malformed one can still become text.
        #[serde(default)]
        tool_calls: Vec<ToolCall>,
        /// How many generated tokens this delta covers (text can lag tokens at UTF-8 or stop-
        /// string boundaries, so one delta may cover several tokens, or none).
        token_count: u32,
        logprobs: Option<Vec<TokenLogprob>>,
    },
    /// The last frame of a request that was accepted.
    Done {
        id: u64,
        finish_reason: FinishReason,
        /// The stop string that ended the answer, when one did (`finish_reason` is then `Stop`).
        #[serde(default)]
        stop_sequence: Option<String>,
        usage: Usage,
        timings: Timings,
    },
    /// The answer to `Embed`: one vector per input, in the request's order.
    Embeddings {
        id: u64,
        vectors: Vec<Vec<f32>>,
        /// Tokens of all inputs together, special tokens included.
        prompt_tokens: u32,
    },
    /// The answer to `Rerank`: one relevance score per document, in the request's order.
    Scores {
        id: u64,
        scores: Vec<f32>,
        /// Tokens of all query-document pairs together, special tokens included.
        prompt_tokens: u32,
    },
    /// A request that was accepted failed mid-generation; no `Done` follows.
    Error {
        id: u64,
        message: String,
    },
    Stats(WorkerStats),
}

/// Texts to embed, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbedRequest {
    pub inputs: Vec<EmbedInput>,
    /// Cut an input longer than the model's maximum instead of refusing the request.
    pub truncate: bool,
    /// Keep the first `dimensions` components of each vector, re-normalized; only for models
    /// trained for it (Matryoshka), refused otherwise.
    pub dimensions: Option<u32>,
    /// Which of the model's prompts (`config_sentence_transformers.json`, e.g. Qwen3-Embedding's
    /// `query` instruction) goes before each text input; `None` means the model's default
    /// prompt, if it names one.
    #[serde(default)]
    pub prompt_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EmbedInput {
    /// Tokenized by the worker, with the model's special tokens, after the request's prompt.
    Text(String),
    /// Token ids, embedded as given.
    Tokens(Vec<u32>),
}

/// A query and the documents to score against it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankRequest {
    pub query: String,
    pub documents: Vec<String>,
    /// Cut a query-document pair longer than the model's maximum instead of refusing it.
    pub truncate: bool,
}

/// A prompt that does not fit the model's context window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextOverflow {
    pub prompt_tokens: u32,
    pub context_tokens: u32,
}

/// Why the worker refused a request; the supervisor maps each kind to one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectKind {
    /// The prompt does not fit in the context window with the requested completion.
    PromptTooLong,
    /// The request is malformed for this model (bad chat template input, unknown token ids).
    InvalidRequest,
    /// Prefilling this prompt would need more memory than the guard allows right now.
    PrefillMemory,
    /// The worker's queue is full.
    Overloaded,
    /// The worker received `Shutdown` and takes no new requests.
    ShuttingDown,
    /// The model cannot do this (a chat request to an embedding model, `dimensions` for a
    /// model not trained for it).
    Unsupported,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FinishReason {
    /// End-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` or the context window was reached.
    Length,
    /// The supervisor sent `Cancel`, or the worker is shutting down.
    Cancelled,
    /// The model ended its turn after calling tools.
    ToolCalls,
}

/// One tool call the model made, as the worker parsed it from its model's format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's position among this answer's calls, from 0.
    pub index: u32,
    pub name: String,
    /// A JSON object, as text.
    pub arguments: String,
}

/// Whether and how the model may call the tools of a chat prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolChoice {
    /// The model decides; calls in its output are parsed.
    #[default]
    Auto,
    /// No tool calls: the tools are left out of the prompt and the output is all text.
    None,
    /// At least one call, enforced by a grammar.
    Required,
    /// A call of this function, enforced by a grammar.
    Function { name: String },
}

/// A grammar the output must follow, enforced token by token by constrained decoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum OutputFormat {
    /// Any JSON object.
    JsonObject,
    /// JSON valid against `schema`; `strict` refuses schema features the grammar cannot enforce.
    JsonSchema {
        schema: serde_json::Value,
        strict: bool,
    },
    /// A grammar in llguidance's Lark dialect.
    Lark { grammar: String },
}

/// What to generate and how to sample it. A sampling field is `None` where the client left it
/// out: the supervisor fills those in from the model's defaults before sending, so the worker
/// only sees `None` from other callers, and reads it as "off" (temperature 1, filters and
/// penalties off, `max_tokens` up to the context window, no stop strings, `tool_choice` auto).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateRequest {
    pub prompt: Prompt,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    /// OpenAI's: subtracted once from the logit of every token already generated.
    pub presence_penalty: Option<f32>,
    /// OpenAI's: subtracted from a token's logit once per time it was generated.
    pub frequency_penalty: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Option<Vec<String>>,
    /// How many alternatives to report per token (`top_logprobs`); `None` means no logprobs.
    pub logprobs: Option<u32>,
    pub tool_choice: Option<ToolChoice>,
    /// `None` lets the model's format decide (several calls where it can express them).
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Constrains the output (JSON mode, a schema, a grammar); tool choices that force a call
    /// take precedence, since the call is then the whole output.
    #[serde(default)]
    pub output_format: Option<OutputFormat>,
    /// Only count the prompt's tokens (Anthropic's `count_tokens`): the worker answers
    /// `Accepted` with the count, then `Done` with no completion, and runs no compute.
    #[serde(default)]
    pub count_only: bool,
    /// At most this many tokens of thinking: past it the worker closes the model's reasoning
    /// block itself and the answer follows (Anthropic's `thinking.budget_tokens`).
    #[serde(default)]
    pub reasoning_budget: Option<u32>,
    /// How this request guesses tokens ahead, in place of its model's (`speculative`, corral's
    /// extension); `None`: the model's.
    #[serde(default)]
    pub speculative: Option<SpeculativeMethod>,
}

/// How decoding guesses tokens ahead for the model to check (speculative decoding): `[models.ID]
/// speculative`, the worker's `--speculative`, and a request's `speculative`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpeculativeMethod {
    Off,
    /// Prompt lookup: n-grams of the conversation itself.
    Ngram,
    /// A smaller model of the same tokenizer (`[models.ID] draft`).
    Draft,
    /// The model's own multi-token-prediction layer.
    Mtp,
}

impl SpeculativeMethod {
    pub const ALL: [Self; 4] = [Self::Off, Self::Ngram, Self::Draft, Self::Mtp];

    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Ngram => "ngram",
            Self::Draft => "draft",
            Self::Mtp => "mtp",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|method| method.name() == name)
    }
}

impl GenerateRequest {
    /// Greedy decoding of `prompt` up to `max_tokens`, with nothing else asked: no filters, no
    /// stop strings, no logprobs.
    pub fn greedy(prompt: Prompt, max_tokens: u32) -> Self {
        Self {
            prompt,
            max_tokens: Some(max_tokens),
            temperature: Some(0.0),
            top_p: None,
            top_k: None,
            min_p: None,
            repetition_penalty: None,
            presence_penalty: None,
            frequency_penalty: None,
            seed: None,
            stop: None,
            logprobs: None,
            tool_choice: None,
            parallel_tool_calls: None,
            output_format: None,
            count_only: false,
            reasoning_budget: None,
            speculative: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Prompt {
    /// A completion prompt, tokenized by the worker as is.
    Text(String),
    /// A chat, rendered by the worker with the model's own chat template. Messages and tools are
    /// passed through as the client sent them (OpenAI shapes vary by model and template), as
    /// `serde_json::Value`, which MessagePack carries losslessly: objects keep their key order,
    /// integers stay integers.
    Chat {
        messages: Vec<serde_json::Value>,
        tools: Option<Vec<serde_json::Value>>,
        /// Extra variables for the template (`chat_template_kwargs`, e.g. `enable_thinking`).
        #[serde(default)]
        template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
        /// The images of the chat, in message order: `images[n]` is the n-th content part
        /// `{"type": "image"}` of `messages` (what Hugging Face chat templates render as the
        /// model's image placeholder).
        #[serde(default)]
        images: Vec<PromptImage>,
    },
    /// Pre-tokenized input.
    Tokens(Vec<u32>),
}

/// An image of a chat prompt as the client sent it (PNG, JPEG, WebP or GIF bytes): the worker
/// decodes and preprocesses it for its model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptImage {
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
    /// Where the client put it, in the called API's own terms (`messages[1].content[0]`,
    /// `input[2].content[1]`), so that an error names it.
    pub location: String,
}

/// One generated token's log probability and its most likely alternatives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token_id: u32,
    /// The token's text, decoded on its own (lossy for byte-fallback tokens).
    pub token: String,
    pub logprob: f32,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token_id: u32,
    pub token: String,
    pub logprob: f32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Prompt tokens restored from the prefix cache instead of prefilled.
    #[serde(default)]
    pub cached_tokens: u32,
    /// Tokens guessed ahead (speculative decoding), and of those the ones the model confirmed.
    #[serde(default)]
    pub drafted_tokens: u32,
    #[serde(default)]
    pub accepted_tokens: u32,
    /// The first prompt token that differs from what the prefix cache held on the prompt's path
    /// (a kept tail with another token there); `None` where the prompt only went on past what
    /// was cached, or where a block ended the match, whose differing token the cache cannot tell.
    #[serde(default)]
    pub diverged_at: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    pub prefill_ms: u64,
    pub decode_ms: u64,
    /// The prompt's images the vision tower encoded (an image whose rows the worker kept from
    /// an earlier request is not), and the time it took on them, within `prefill_ms`.
    #[serde(default)]
    pub images_encoded: u32,
    #[serde(default)]
    pub image_encode_ms: u64,
}

/// A worker's answer to `GetStats`: its load and memory as only it can measure them (MLX's
/// allocator counters live inside the worker process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStats {
    pub pid: u32,
    pub active_sequences: u32,
    pub queued_requests: u32,
    pub completed: u64,
    pub cancelled: u64,
    pub mlx_active_bytes: u64,
    pub mlx_cache_bytes: u64,
    pub mlx_peak_bytes: u64,
    pub resident_bytes: u64,
    /// Absent when the worker runs without a prefix cache.
    #[serde(default)]
    pub prefix_cache: Option<PrefixCacheStats>,
}

/// The prefix cache's counters. `saves_enqueued - saves_persisted - save_drops` is the SSD
/// writer's backlog.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixCacheStats {
    pub hit_blocks: u64,
    pub miss_blocks: u64,
    pub hit_tokens: u64,
    pub miss_tokens: u64,
    pub ram_bytes: u64,
    pub ram_evictions: u64,
    pub saves_enqueued: u64,
    /// Written and renamed into place.
    pub saves_persisted: u64,
    /// Dropped: the writer's queue stayed full, or the disk was full.
    pub save_drops: u64,
    pub disk_evictions: u64,
    pub disk_bytes: u64,
    pub disk_files: u64,
    /// Block files that failed their checks on load (and were deleted).
    pub load_errors: u64,
}

impl ToWorker {
    /// The variant's name, for logs and error messages that must not dump a whole prompt.
    pub fn name(&self) -> &'static str {
        match self {
            ToWorker::Welcome => "Welcome",
            ToWorker::Refused { .. } => "Refused",
            ToWorker::Generate { .. } => "Generate",
            ToWorker::Embed { .. } => "Embed",
            ToWorker::Rerank { .. } => "Rerank",
            ToWorker::Cancel { .. } => "Cancel",
            ToWorker::GetStats => "GetStats",
            ToWorker::Shutdown => "Shutdown",
        }
    }
}

impl FromWorker {
    /// The variant's name, for logs and error messages that must not dump a token or a delta.
    pub fn name(&self) -> &'static str {
        match self {
            FromWorker::Hello { .. } => "Hello",
            FromWorker::Ready { .. } => "Ready",
            FromWorker::LoadFailed { .. } => "LoadFailed",
            FromWorker::Accepted { .. } => "Accepted",
            FromWorker::Rejected { .. } => "Rejected",
            FromWorker::Delta { .. } => "Delta",
            FromWorker::Done { .. } => "Done",
            FromWorker::Embeddings { .. } => "Embeddings",
            FromWorker::Scores { .. } => "Scores",
            FromWorker::Error { .. } => "Error",
            FromWorker::Stats(_) => "Stats",
        }
    }
}
