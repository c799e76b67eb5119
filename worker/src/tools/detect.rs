//! What a model's chat template and vocabulary say about its output: which tool-call syntax it
//! writes, whether its template renders tools, whether it thinks in `<think>` blocks, and which
//! special tokens must be kept when decoding so that the parser sees its markers.
//!
//! Detection is textual: templates are matched on the marker strings they write, the way
//! Ollama and llama.cpp pick a parser, because a template is code that can spell a format in
//! many ways but always has to print its markers.

use tokenizers::Tokenizer;

use super::format::ToolFormat;
use super::markers::{
    ARG_KEY_OPEN, ARGS, GRANITE_TOOL_CALL, HARMONY_CHANNEL, TOOL_CALL_OPEN, TOOL_CALLS,
};
use super::markers::{
    DEEPSEEK_CALLS_BEGIN, KIMI_SECTION_BEGIN, MISTRAL_THINK_OPEN, PHI_TOOLS_CLOSE,
};
use super::markers::{
    FUNCTION_OPEN, GEMMA4_CALL_OPEN, HEADER_START, PARAMETER_OPEN, PYTHON_TAG, PYTHONIC_CALL_OPEN,
    THINK_CLOSE,
};

/// What the worker learns once, at load, about a model's output formats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFormats {
    pub tool_format: ToolFormat,
    /// The template renders the `tools` it is given; otherwise corral writes them into the
    /// system message itself (`rewrite_messages`).
    pub native_tools: bool,
    /// The model may open its answer with a `<think>` block.
    pub reasoning: bool,
    /// Special tokens the detokenizer must keep as text: the format's markers (and `<think>`,
    /// `</think>` for a reasoning model) where the vocabulary marks them special.
    pub kept_tokens: Vec<u32>,
}

impl ModelFormats {
    pub fn detect(template_source: Option<&str>, tokenizer: &Tokenizer) -> ModelFormats {
        let template = template_source.unwrap_or("");
        let in_vocab = |token: &str| tokenizer.token_to_id(token).is_some();
        let tool_format = tool_format(template, &in_vocab);
        let (_, thinking_close) = tool_format.thinking_markers();
        let reasoning = template.contains(thinking_close) || in_vocab(THINK_CLOSE);
        let mut markers = tool_format.token_markers().to_vec();
        if reasoning {
            markers.extend(tool_format.thinking_tokens());
        }
        ModelFormats {
            tool_format,
            native_tools: references_tools(template),
            reasoning,
            kept_tokens: special_ids(tokenizer, &markers),
        }
    }
}

/// The first rule that matches, most specific first: Qwen3-Coder's and GLM-4.5's templates
/// also write `<tool_call>`, Hermes-style Llama fine-tunes keep Llama's `<|python_tag|>`
/// token, and llama.cpp's rewrite of Phi-4-mini's template writes Granite's `<|tool_call|>`
/// beside the `<|/tool|>` that ends Phi's tool list.
fn tool_format(template: &str, in_vocab: &dyn Fn(&str) -> bool) -> ToolFormat {
    if let Some(format) = deepseek_or_kimi(template, in_vocab) {
        format
    } else if template.contains(HARMONY_CHANNEL) {
        ToolFormat::Harmony
    } else if template.contains(GEMMA4_CALL_OPEN) {
        ToolFormat::Gemma4
    } else if template.contains(PYTHONIC_CALL_OPEN) {
        ToolFormat::Pythonic
    } else if template.contains(HEADER_START) && !template.contains(LLAMA_JSON_KEY) {
        ToolFormat::Llama4Pythonic
    } else if template.contains(PHI_TOOLS_CLOSE) {
        ToolFormat::Phi4Mini
    } else if template.contains(ARG_KEY_OPEN) {
        ToolFormat::Glm
    } else if template.contains(FUNCTION_OPEN) && template.contains(PARAMETER_OPEN) {
        ToolFormat::QwenXml
    } else if template.contains(GRANITE_TOOL_CALL) {
        ToolFormat::Granite
    } else if template.contains(TOOL_CALL_OPEN) {
        ToolFormat::Hermes
    } else if template.contains(TOOL_CALLS) && template.contains(MISTRAL_THINK_OPEN) {
        ToolFormat::MistralThink
    } else if template.contains(TOOL_CALLS) && template.contains(ARGS) {
        ToolFormat::MistralArgs
    } else if template.contains(TOOL_CALLS) || in_vocab(TOOL_CALLS) {
        ToolFormat::Mistral
    } else if template.contains(PYTHON_TAG) || in_vocab(PYTHON_TAG) || llama3_tools(template) {
        ToolFormat::Llama3Json
    } else {
        ToolFormat::Hermes
    }
}

/// DeepSeek's calls, V3's fenced JSON told apart by its fence; Kimi K2's, by the section marker
/// in the template or, for the first K2 template (which writes no past calls), the vocabulary.
fn deepseek_or_kimi(template: &str, in_vocab: &dyn Fn(&str) -> bool) -> Option<ToolFormat> {
    if template.contains(DEEPSEEK_CALLS_BEGIN) {
        Some(if template.contains("```json") {
            ToolFormat::DeepSeekV3
        } else {
            ToolFormat::DeepSeekV31
        })
    } else if template.contains(KIMI_SECTION_BEGIN) || in_vocab(KIMI_SECTION_BEGIN) {
        Some(ToolFormat::Kimi)
    } else {
        None
    }
}
/// What Llama's JSON calls name their arguments; a Llama 4 template that asks for it (as
/// transformers' first one did) wants Llama 3's calls, and one that does not, Python calls.
const LLAMA_JSON_KEY: &str = "\"parameters\"";

/// Llama 3.2's template has no `<|python_tag|>` but asks for `"parameters"` in an `ipython`
/// conversation ended by `<|eot_id|>`.
fn llama3_tools(template: &str) -> bool {
    template.contains(LLAMA_JSON_KEY)
        && (template.contains("<|eot_id|>") || template.contains("ipython"))
}

/// Whether `tools` (or SmolLM3's `xml_tools`, see `chat_template`) is used as a variable inside
/// a `{% %}` or `{{ }}` tag: as a whole identifier (`tools_in_user_message` and `message.tools`
/// do not count), outside string literals (a template's prose about tools does not count).
/// Comments `{# #}` are not tags.
fn references_tools(template: &str) -> bool {
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let close = match after.chars().next() {
            Some('%') => "%}",
            Some('{') => "}}",
            _ => {
                rest = after;
                continue;
            }
        };
        let body = &after[1..];
        let end = body.find(close).unwrap_or(body.len());
        if has_tools_identifier(&body[..end]) {
            return true;
        }
        rest = &body[end..];
    }
    false
}

fn has_tools_identifier(expr: &str) -> bool {
    let mut quote = None;
    let mut word_start = None;
    let mut previous = ' ';
    for (i, c) in expr.char_indices().chain([(expr.len(), ' ')]) {
        if let Some(q) = quote {
            if c == q && previous != '\\' {
                quote = None;
            }
        } else if c.is_alphanumeric() || c == '_' {
            word_start.get_or_insert(i);
        } else {
            if let Some(start) = word_start.take() {
                let attribute = expr[..start].ends_with('.');
                if matches!(&expr[start..i], "tools" | "xml_tools") && !attribute {
                    return true;
                }
            }
            if c == '\'' || c == '"' {
                quote = Some(c);
            }
        }
        previous = c;
    }
    false
}

/// The ids of those `markers` that are special added tokens, sorted.
fn special_ids(tokenizer: &Tokenizer, markers: &[&str]) -> Vec<u32> {
    let mut ids: Vec<u32> = tokenizer
        .get_added_tokens_decoder()
        .into_iter()
        .filter(|(_, token)| token.special && markers.contains(&token.content.as_str()))
        .map(|(id, _)| id)
        .collect();
    ids.sort_unstable();
    ids
}
