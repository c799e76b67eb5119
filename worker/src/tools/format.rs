//! The tool-call syntaxes the worker understands.

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
}
