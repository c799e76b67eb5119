//! Where a reasoning model's output starts: before, inside, or with no `<think>` block.

use super::markers::{THINK_CLOSE, THINK_OPEN};

/// Where the output starts with respect to a `<think>` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningStart {
    /// No reasoning: the prompt closed it, or the model does not think.
    Off,
    /// The model may open its output with `<think>`.
    Maybe,
    /// The prompt opened the block: the output starts inside it.
    Inside,
}

/// Where a reasoning model's output starts, from the rendered prompt: templates that force
/// thinking (DeepSeek-R1) end it with `<think>`, those that disable it (Qwen3 with
/// `enable_thinking=false`) with an empty `<think></think>`.
pub fn prompt_opens_reasoning(rendered_prompt: &str) -> ReasoningStart {
    let prompt = rendered_prompt.trim_end();
    if prompt.ends_with(THINK_OPEN) {
        ReasoningStart::Inside
    } else if prompt.ends_with(THINK_CLOSE) {
        ReasoningStart::Off
    } else {
        ReasoningStart::Maybe
    }
}
