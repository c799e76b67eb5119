//! Kimi K2's calls, inside a `<|tool_calls_section_begin|>` ... `<|tool_calls_section_end|>`
//! section, each `<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{...}
//! <|tool_call_end|>`. The id names the function; its index counts the conversation's calls,
//! which `call_ids::kimi_call_ids` writes back the same way, so it is not kept here.

use super::calls;
use super::fragment::ToolCall;
use super::markers::{KIMI_ARGUMENT_BEGIN, KIMI_CALL_BEGIN, KIMI_CALL_END};

/// The body of a section, between its markers.
pub(super) fn parse_calls(body: &str) -> Result<Vec<ToolCall>, String> {
    calls::section_calls(body, (KIMI_CALL_BEGIN, KIMI_CALL_END), parse_call)
}

fn parse_call(text: &str) -> Result<ToolCall, String> {
    let (id, arguments) = text
        .split_once(KIMI_ARGUMENT_BEGIN)
        .ok_or("a call without its arguments")?;
    Ok(ToolCall {
        name: calls::function_name(name_of(id.trim()))?,
        arguments: calls::arguments_text(arguments)?,
    })
}

/// The function's name in a call id: `functions.NAME:INDEX`, either part possibly left out.
fn name_of(id: &str) -> &str {
    let name = id.strip_prefix("functions.").unwrap_or(id);
    match name.rsplit_once(':') {
        Some((name, index)) if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => name,
    }
}
