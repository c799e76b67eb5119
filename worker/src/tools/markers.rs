//! The literal texts that open and close reasoning and tool calls in model output, shared by
//! format detection (which of them must survive detokenization) and the parser.

pub const THINK_OPEN: &str = "<think>";
pub const THINK_CLOSE: &str = "</think>";

/// Hermes and Qwen: one call per block.
pub const TOOL_CALL_OPEN: &str = "<tool_call>";
pub const TOOL_CALL_CLOSE: &str = "</tool_call>";

/// Qwen3-Coder's XML call, also seen without the `<tool_call>` wrapper.
pub const FUNCTION_OPEN: &str = "<function=";
pub const FUNCTION_CLOSE: &str = "</function>";
pub const PARAMETER_OPEN: &str = "<parameter=";
pub const PARAMETER_CLOSE: &str = "</parameter>";

/// Llama 3.1+: the token before a call in the `ipython` environment.
pub const PYTHON_TAG: &str = "<|python_tag|>";

/// Llama 4: its turn header (which tells its templates from Llama 3's), and the tokens it may
/// wrap its list of Python calls in.
pub const HEADER_START: &str = "<|header_start|>";
pub const PYTHON_START: &str = "<|python_start|>";
pub const PYTHON_END: &str = "<|python_end|>";

/// Granite 3: the token before a JSON list of calls.
pub const GRANITE_TOOL_CALL: &str = "<|tool_call|>";
/// Granite 3.3, thinking: its answer after `</think>` is wrapped in these.
pub const RESPONSE_OPEN: &str = "<response>";
pub const RESPONSE_CLOSE: &str = "</response>";

/// Mistral's control tokens around calls.
pub const TOOL_CALLS: &str = "[TOOL_CALLS]";
pub const ARGS: &str = "[ARGS]";
pub const CALL_ID: &str = "[CALL_ID]";

/// Magistral's and Ministral 3 Reasoning's thinking block, two control tokens.
pub const MISTRAL_THINK_OPEN: &str = "[THINK]";
pub const MISTRAL_THINK_CLOSE: &str = "[/THINK]";

/// Phi-4-mini: its template lists the tools between `<|tool|>` and `<|/tool|>` in the system
/// turn; the model writes its calls as `functools[{"name": ..., "arguments": {...}}, ...]`, or
/// as a JSON call between its `<|tool_call|>` and `<|/tool_call|>` tokens (the first is
/// `GRANITE_TOOL_CALL`'s text).
pub const PHI_TOOLS_CLOSE: &str = "<|/tool|>";
pub const FUNCTOOLS: &str = "functools[";
pub const PHI_TOOL_CALL_CLOSE: &str = "<|/tool_call|>";

/// GLM-4.5's call arguments: `<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>`, inside a
/// `<tool_call>NAME` block.
pub const ARG_KEY_OPEN: &str = "<arg_key>";
pub const ARG_KEY_CLOSE: &str = "</arg_key>";
pub const ARG_VALUE_OPEN: &str = "<arg_value>";
pub const ARG_VALUE_CLOSE: &str = "</arg_value>";

/// gpt-oss's harmony format: the tokens around each message's header and body.
pub const HARMONY_START: &str = "<|start|>";
pub const HARMONY_CHANNEL: &str = "<|channel|>";
pub const HARMONY_CONSTRAIN: &str = "<|constrain|>";
pub const HARMONY_MESSAGE: &str = "<|message|>";
pub const HARMONY_END: &str = "<|end|>";
pub const HARMONY_RETURN: &str = "<|return|>";
pub const HARMONY_CALL: &str = "<|call|>";

/// Gemma 4: a call is `<|tool_call>call:NAME{...}<tool_call|>`, its strings between `<|"|>`
/// quotes; thinking is a `<|channel>thought\n...<channel|>` block.
pub const GEMMA4_CALL_OPEN: &str = "<|tool_call>";
pub const GEMMA4_CALL_CLOSE: &str = "<tool_call|>";
pub const GEMMA4_QUOTE: &str = "<|\"|>";
pub const GEMMA4_CHANNEL_OPEN: &str = "<|channel>";
pub const GEMMA4_CHANNEL_CLOSE: &str = "<channel|>";
/// What opens Gemma 4's thinking: its channel marker and the channel's name.
pub const GEMMA4_THOUGHT_OPEN: &str = "<|channel>thought";

/// LFM2: a list of Python-style calls, `<|tool_call_start|>[name(key='text', n=3)]<|tool_call_end|>`.
pub const PYTHONIC_CALL_OPEN: &str = "<|tool_call_start|>";
pub const PYTHONIC_CALL_CLOSE: &str = "<|tool_call_end|>";

/// DeepSeek V3: a section of calls, each `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
/// <｜tool▁call▁end｜>` (V3.1), or `function<｜tool▁sep｜>NAME` then the arguments in a
/// fenced JSON block (V3, R1). Their bars and spaces are the full-width `｜` and `▁`.
pub const DEEPSEEK_CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
pub const DEEPSEEK_CALLS_END: &str = "<｜tool▁calls▁end｜>";
pub const DEEPSEEK_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
pub const DEEPSEEK_CALL_END: &str = "<｜tool▁call▁end｜>";
pub const DEEPSEEK_SEP: &str = "<｜tool▁sep｜>";

/// Kimi K2: a section of calls, each `<|tool_call_begin|>functions.NAME:INDEX
/// <|tool_call_argument_begin|>{...}<|tool_call_end|>`.
pub const KIMI_SECTION_BEGIN: &str = "<|tool_calls_section_begin|>";
pub const KIMI_SECTION_END: &str = "<|tool_calls_section_end|>";
pub const KIMI_CALL_BEGIN: &str = "<|tool_call_begin|>";
pub const KIMI_ARGUMENT_BEGIN: &str = "<|tool_call_argument_begin|>";
pub const KIMI_CALL_END: &str = "<|tool_call_end|>";

/// The length of the longest tail of `text` that is a proper prefix of one of `markers`.
/// Only prefixes that end on one of the marker's character boundaries count (DeepSeek's are not
/// ASCII), so the tail starts on a character boundary of `text`.
pub(super) fn held_tail(text: &str, markers: &[&str]) -> usize {
    markers
        .iter()
        .filter_map(|marker| {
            (1..marker.len())
                .rev()
                .filter(|&len| marker.is_char_boundary(len))
                .find(|&len| text.ends_with(&marker[..len]))
        })
        .max()
        .unwrap_or(0)
}
