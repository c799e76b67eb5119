//! The tool-call syntaxes the worker understands.

use super::markers::{
    ARGS, CALL_ID, GRANITE_TOOL_CALL, PYTHON_TAG, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, TOOL_CALLS,
};

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
    /// Granite 3: `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]`.
    Granite,
}

impl ToolFormat {
    /// Whether the model can make several calls in one turn. Meta's JSON tool format is one
    /// call per turn (the template renders a single call), so Llama is told to make one.
    pub fn supports_parallel(self) -> bool {
        !matches!(self, Self::Llama3Json)
    }

    /// The marker texts of this format that may be single special tokens, which decoding with
    /// `skip_special_tokens` would drop.
    pub(super) fn token_markers(self) -> &'static [&'static str] {
        match self {
            Self::Hermes | Self::QwenXml => &[TOOL_CALL_OPEN, TOOL_CALL_CLOSE],
            Self::Llama3Json => &[PYTHON_TAG],
            Self::Mistral => &[TOOL_CALLS, ARGS, CALL_ID],
            Self::Granite => &[GRANITE_TOOL_CALL],
        }
    }
}
