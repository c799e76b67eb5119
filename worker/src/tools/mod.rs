//! Model formats for agents' output: which tool-call syntax a model writes and whether it
//! thinks in `<think>` blocks (`detect`); the streaming parser that splits generated text into
//! content, reasoning and whole tool calls (`parser`, with `calls`, `xml_call`, `glm_call`,
//! `gemma4_call`, `pythonic_call`, `deepseek_call` and `kimi_call` reading the calls and
//! `reasoning` saying where a thinking block starts; gpt-oss's channels have a parser of their
//! own, `harmony`); and the rewrites of a conversation before rendering: tools taught to a model
//! whose template has none (`fallback`), tool-call ids in the shape Mistral's and Kimi's
//! templates demand (`call_ids`), tool results inside the calling turn as Gemma 4's template
//! reads them (`tool_responses`), DeepSeek's tools described in its own words
//! (`deepseek_tools`), Phi-4-mini's tools in its system message's `tools` string and its past
//! calls as its `functools[` text (`phi4_tools`).

mod call_ids;
mod calls;
mod cursor;
mod deepseek_call;
mod deepseek_tools;
mod detect;
mod fallback;
mod format;
mod fragment;
mod gemma4_call;
mod glm_call;
mod harmony;
mod kimi_call;
mod markers;
mod parser;
mod phi4_tools;
mod pythonic_call;
mod reasoning;
mod tool_responses;
mod xml_call;

pub use call_ids::{kimi_call_ids, mistral_call_ids};
pub use deepseek_tools::deepseek_messages;
pub use detect::ModelFormats;
pub use fallback::rewrite_messages;
pub use format::ToolFormat;
pub use fragment::{Fragment, ToolCall};
pub use parser::{OutputParser, ParserConfig};
pub use phi4_tools::phi4_messages;
pub use reasoning::{ReasoningStart, deepseek_thinking, prompt_opens_reasoning};
pub use tool_responses::gemma4_tool_responses;

#[cfg(test)]
mod tests;
