//! Model formats for agents' output: which tool-call syntax a model writes and whether it
//! thinks in `<think>` blocks (`detect`); the streaming parser that splits generated text into
//! content, reasoning and whole tool calls (`parser`, with `calls`, `xml_call` and `glm_call`
//! reading the calls and `reasoning` saying where a `<think>` block starts; gpt-oss's channels
//! have a parser of their own, `harmony`); and the rewrite that teaches
//! tools to a model whose template has none (`fallback`); tool-call ids in the shape Mistral's
//! templates demand (`call_ids`).

mod call_ids;
mod calls;
mod detect;
mod fallback;
mod format;
mod fragment;
mod glm_call;
mod harmony;
mod markers;
mod parser;
mod reasoning;
mod xml_call;

pub use call_ids::mistral_call_ids;
pub use detect::ModelFormats;
pub use fallback::rewrite_messages;
pub use format::ToolFormat;
pub use fragment::{Fragment, ToolCall};
pub use parser::{OutputParser, ParserConfig};
pub use reasoning::{ReasoningStart, prompt_opens_reasoning};

#[cfg(test)]
mod tests;
