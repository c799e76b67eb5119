//! Model formats for agents' output: which tool-call syntax a model writes, whether it thinks
//! in `<think>` blocks, and the streaming parser that splits generated text into content,
//! reasoning and whole tool calls.

mod format;

pub use format::ToolFormat;
