//! The tool-call syntaxes the worker understands.

use super::markers::{
    ARG_KEY_CLOSE, ARG_KEY_OPEN, ARG_VALUE_CLOSE, ARG_VALUE_OPEN, ARGS, CALL_ID, GEMMA4_CALL_CLOSE,
    GEMMA4_CALL_OPEN, GEMMA4_CHANNEL_CLOSE, GEMMA4_CHANNEL_OPEN, GEMMA4_QUOTE, GEMMA4_THOUGHT_OPEN,
    GRANITE_TOOL_CALL, HARMONY_CALL, HARMONY_CHANNEL, HARMONY_CONSTRAIN, HARMONY_END,
    HARMONY_MESSAGE, HARMONY_RETURN, HARMONY_START, PYTHON_END, PYTHON_START, PYTHON_TAG,
    PYTHONIC_CALL_CLOSE, PYTHONIC_CALL_OPEN, THINK_CLOSE, THINK_OPEN, TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN, TOOL_CALLS,
};
use super::markers::{
    DEEPSEEK_CALL_BEGIN, DEEPSEEK_CALL_END, DEEPSEEK_CALLS_BEGIN, DEEPSEEK_CALLS_END, DEEPSEEK_SEP,
    KIMI_ARGUMENT_BEGIN, KIMI_CALL_BEGIN, KIMI_CALL_END, KIMI_SECTION_BEGIN, KIMI_SECTION_END,
};
use super::markers::{MISTRAL_THINK_CLOSE, MISTRAL_THINK_OPEN, PHI_TOOL_CALL_CLOSE};

/// How a model writes tool calls in its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// Hermes, Qwen2.5 and Qwen3: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`,
    /// one block per call. Also the format corral teaches a model whose template has no tools.
    Hermes,
    /// Qwen3-Coder: `<tool_call>\n<function=name>\n<parameter=p>\nvalue\n</parameter>\n</function>\n</tool_call>`.
    QwenXml,
    /// Llama 3.1-3.3: `{"name": ..., "parameters": {...}}`, optionally after `<|python_tag|>`.
    Llama3Json,
    /// Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, or the newer
    /// `[TOOL_CALLS]name[ARGS]{...}` per call.
    Mistral,
    /// Mistral's newer notation where the template writes it (Mistral Small 3.2, Magistral,
    /// Devstral, Ministral 3): `[TOOL_CALLS]name[ARGS]{...}` per call. Read as `Mistral`;
    /// forced calls are written in it.
    MistralArgs,
    /// Magistral and Ministral 3 Reasoning: `MistralArgs`' calls, and thinking in a
    /// `[THINK]...[/THINK]` block (two control tokens) where `<think>` would be.
    MistralThink,
    /// Granite 3: `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]`.
    Granite,
    /// GLM-4.5: `<tool_call>name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>`.
    Glm,
    /// gpt-oss's harmony: a message to the call's recipient, `<|channel|>commentary
    /// to=functions.name <|constrain|>json<|message|>{...}<|call|>`, beside the `analysis`
    /// (reasoning) and `final` messages.
    Harmony,
    /// Gemma 4: `<|tool_call>call:name{key:<|"|>text<|"|>,n:3}<tool_call|>`, one block per call.
    Gemma4,
    /// LFM2: `<|tool_call_start|>[name(key='text', n=3), ...]<|tool_call_end|>`, Python calls
    /// with literal arguments.
    Pythonic,
    /// DeepSeek V3.1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}
    /// <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`. V3's notation is read too.
    DeepSeekV31,
    /// DeepSeek V3 and R1: as V3.1, each call `<｜tool▁call▁begin｜>function<｜tool▁sep｜>name
    /// \n```json\n{...}\n```<｜tool▁call▁end｜>`. V3.1's notation is read too.
    DeepSeekV3,
    /// Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.name:0
    /// <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>`, the
    /// call's id (`functions.name:INDEX`, the index counting the conversation's calls) the one
    /// its template writes back with the result.
    Kimi,
    /// Llama 4: the whole answer a Python list of calls, `[name(key="text", n=3), ...]`, bare
    /// or between `<|python_start|>` and `<|python_end|>`.
    Llama4Pythonic,
    /// Phi-4-mini: `functools[{"name": ..., "arguments": {...}}, ...]`, running to the end of
    /// the output; also read: a call (or a list) between `<|tool_call|>` and `<|/tool_call|>`.
    /// Its released template lists the tools but writes no calls, so the notation is what the
    /// model learned: vLLM's and SGLang's parsers for it read `functools[`, and its raw answers
    /// reported from other runtimes are `functools[...]`. `<|tool_call|>` is what a prompt or a
    /// grammar asks for elsewhere (llama.cpp's rewrite of its template, the ONNX cookbook's
    /// grammar), so it is read, and forced calls are written in `functools[`.
    Phi4Mini,
}

impl ToolFormat {
    /// Whether the model can make several calls in one turn. Meta's JSON tool format is one
    /// call per turn (the template renders a single call), so Llama is told to make one; so is
    /// gpt-oss, whose `<|call|>` ends its turn.
    pub fn supports_parallel(self) -> bool {
        !matches!(self, Self::Llama3Json | Self::Harmony)
    }

    /// The texts that open and close this family's thinking: `<think>` blocks, Gemma 4's
    /// thought channel, or Magistral's `[THINK]` block.
    pub fn thinking_markers(self) -> (&'static str, &'static str) {
        match self {
            Self::Gemma4 => (GEMMA4_THOUGHT_OPEN, GEMMA4_CHANNEL_CLOSE),
            Self::MistralThink => (MISTRAL_THINK_OPEN, MISTRAL_THINK_CLOSE),
            _ => (THINK_OPEN, THINK_CLOSE),
        }
    }

    /// The thinking markers that may be single special tokens.
    pub(super) fn thinking_tokens(self) -> &'static [&'static str] {
        match self {
            Self::Gemma4 => &[GEMMA4_CHANNEL_OPEN, GEMMA4_CHANNEL_CLOSE],
            Self::MistralThink => &[MISTRAL_THINK_OPEN, MISTRAL_THINK_CLOSE],
            _ => &[THINK_OPEN, THINK_CLOSE],
        }
    }

    /// The marker texts of this format that may be single special tokens, which decoding with
    /// `skip_special_tokens` would drop.
    pub(super) fn token_markers(self) -> &'static [&'static str] {
        match self {
            Self::Hermes | Self::QwenXml => &[TOOL_CALL_OPEN, TOOL_CALL_CLOSE],
            Self::Llama3Json => &[PYTHON_TAG],
            Self::Mistral | Self::MistralArgs | Self::MistralThink => &[TOOL_CALLS, ARGS, CALL_ID],
            Self::Granite => &[GRANITE_TOOL_CALL],
            Self::Phi4Mini => &[GRANITE_TOOL_CALL, PHI_TOOL_CALL_CLOSE],
            Self::Glm => &[
                TOOL_CALL_OPEN,
                TOOL_CALL_CLOSE,
                ARG_KEY_OPEN,
                ARG_KEY_CLOSE,
                ARG_VALUE_OPEN,
                ARG_VALUE_CLOSE,
            ],
            Self::Gemma4 => &[GEMMA4_CALL_OPEN, GEMMA4_CALL_CLOSE, GEMMA4_QUOTE],
            Self::Pythonic => &[PYTHONIC_CALL_OPEN, PYTHONIC_CALL_CLOSE],
            Self::DeepSeekV31 | Self::DeepSeekV3 => &[
                DEEPSEEK_CALLS_BEGIN,
                DEEPSEEK_CALLS_END,
                DEEPSEEK_CALL_BEGIN,
                DEEPSEEK_CALL_END,
                DEEPSEEK_SEP,
            ],
            Self::Kimi => &[
                KIMI_SECTION_BEGIN,
                KIMI_SECTION_END,
                KIMI_CALL_BEGIN,
                KIMI_ARGUMENT_BEGIN,
                KIMI_CALL_END,
            ],
            Self::Llama4Pythonic => &[PYTHON_START, PYTHON_END],
            Self::Harmony => &[
                HARMONY_START,
                HARMONY_CHANNEL,
                HARMONY_CONSTRAIN,
                HARMONY_MESSAGE,
                HARMONY_END,
                HARMONY_RETURN,
                HARMONY_CALL,
            ],
        }
    }
}
