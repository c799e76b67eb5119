//! Where a reasoning model's output starts: before, inside, or with no thinking block; and the
//! template variable that switches DeepSeek's thinking.

use serde_json::{Map, Value};

use super::format::ToolFormat;

/// Where the output starts with respect to a thinking block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningStart {
    /// No reasoning: the prompt closed it, or the model does not think.
    Off,
    /// The model may open its output with a thinking block.
    Maybe,
    /// The prompt opened the block: the output starts inside it.
    Inside,
}

/// Where a reasoning model's output starts, from the rendered prompt and the family's thinking
/// markers (`ToolFormat::thinking_markers`): templates that force thinking (DeepSeek-R1) end
/// the prompt with the opening marker, those that disable it (Qwen3 with
/// `enable_thinking=false`, Gemma 4 by default) with an empty block.
pub fn prompt_opens_reasoning(rendered_prompt: &str, markers: (&str, &str)) -> ReasoningStart {
    let (open, close) = markers;
    let prompt = rendered_prompt.trim_end();
    if prompt.ends_with(open) {
        ReasoningStart::Inside
    } else if prompt.ends_with(close) {
        ReasoningStart::Off
    } else {
        ReasoningStart::Maybe
    }
}

/// The template variables with DeepSeek V3.1's thinking switch set: its template reads
/// `thinking`, where corral's switch (`reasoning_effort`, Anthropic's `thinking`) and Qwen3's
/// templates use `enable_thinking`. `None` when nothing changes: another family, no
/// `enable_thinking`, or a `thinking` the client set itself.
pub fn deepseek_thinking(
    format: ToolFormat,
    kwargs: Option<&Map<String, Value>>,
) -> Option<Map<String, Value>> {
    if !matches!(format, ToolFormat::DeepSeekV31 | ToolFormat::DeepSeekV3) {
        return None;
    }
    let kwargs = kwargs?;
    let enabled = kwargs.get("enable_thinking")?;
    if kwargs.contains_key("thinking") {
        return None;
    }
    let mut kwargs = kwargs.clone();
    kwargs.insert("thinking".to_owned(), enabled.clone());
    Some(kwargs)
}
