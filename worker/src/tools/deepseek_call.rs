//! DeepSeek's calls, inside a `<｜tool▁calls▁begin｜>` ... `<｜tool▁calls▁end｜>` section, each
//! `<｜tool▁call▁begin｜>` ... `<｜tool▁call▁end｜>`. V3.1 writes the name, the separator and the
//! arguments' JSON; V3 and R1 write the call's type (`function`), the separator, the name on a
//! line of its own and the arguments in a fenced JSON block. Either is read whatever the
//! template, since fine-tunes of one are seen writing the other.

use super::calls;
use super::fragment::ToolCall;
use super::markers::{DEEPSEEK_CALL_BEGIN, DEEPSEEK_CALL_END, DEEPSEEK_SEP};

/// The body of a section, between its markers.
pub(super) fn parse_calls(body: &str) -> Result<Vec<ToolCall>, String> {
    calls::section_calls(body, (DEEPSEEK_CALL_BEGIN, DEEPSEEK_CALL_END), parse_call)
}

fn parse_call(text: &str) -> Result<ToolCall, String> {
    let (head, arguments) = text
        .split_once(DEEPSEEK_SEP)
        .ok_or("a call without its separator")?;
    let arguments = arguments.trim();
    // V3.1's arguments follow the separator; a name there is V3's, after the call's type.
    let (name, arguments) = if arguments.starts_with('{') {
        (head, arguments)
    } else if head.trim() == "function" {
        fenced(arguments)?
    } else {
        return Err(format!("{:?} is not a call's type", head.trim()));
    };
    Ok(ToolCall {
        name: calls::function_name(name)?,
        arguments: calls::arguments_text(arguments)?,
    })
}

/// V3's `NAME\n```json\n{...}\n```` as the name and the JSON.
fn fenced(text: &str) -> Result<(&str, &str), String> {
    let (name, block) = text
        .split_once('\n')
        .ok_or("no arguments after the function's name")?;
    let block = block.trim();
    let json = block
        .strip_prefix("```json")
        .or_else(|| block.strip_prefix("```"))
        .ok_or("the arguments are not in a fenced block")?;
    let json = json
        .strip_suffix("```")
        .ok_or("the arguments' fenced block is not closed")?;
    Ok((name, json))
}
