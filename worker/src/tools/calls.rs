//! Turning a finished candidate's text into tool calls, for the JSON-based formats: Hermes
//! blocks (whose body may also be Qwen3-Coder's XML), Llama's bare objects, Mistral's
//! `[TOOL_CALLS]` sections, Granite's `<|tool_call|>` lists and Phi-4-mini's `functools[` lists. Every function either returns
//! whole valid calls or says why not; model output is untrusted, so nothing here panics or
//! half-accepts a call.

use serde_json::Value;

use super::fragment::ToolCall;
use super::markers::{
    ARGS, CALL_ID, FUNCTION_OPEN, GRANITE_TOOL_CALL, PYTHON_TAG, TOOL_CALLS, held_tail,
};
use super::markers::{FUNCTOOLS, PHI_TOOL_CALL_CLOSE};
use super::xml_call::{self, ParamTypes};

/// The body of a `<tool_call>` block: Hermes JSON, or Qwen3-Coder's `<function=...>` (models
/// of either family are seen writing the other's body inside the same wrapper).
pub(super) fn parse_block(body: &str, types: &ParamTypes) -> Result<ToolCall, String> {
    let body = body.trim();
    if body.starts_with(FUNCTION_OPEN) {
        return xml_call::parse_function(body, types);
    }
    let (value, rest) = json_prefix(body)?;
    if !rest.trim().is_empty() {
        return Err("text after the call's JSON object".into());
    }
    call_from_value(value)
}

/// Llama 3's output when it starts with a call: an optional `<|python_tag|>`, then one
/// `{"name": ..., "parameters": {...}}` object or several separated by `;`.
pub(super) fn parse_llama(text: &str) -> Result<Vec<ToolCall>, String> {
    let text = text.trim_start();
    let mut rest = text.strip_prefix(PYTHON_TAG).unwrap_or(text);
    let mut calls = Vec::new();
    loop {
        let (value, after) = json_prefix(rest)?;
        calls.push(call_from_value(value)?);
        let after = after.trim_start();
        match after.strip_prefix(';') {
            Some(next) if !next.trim().is_empty() => rest = next,
            Some(_) => return Ok(calls),
            None if after.is_empty() => return Ok(calls),
            None => return Err("text after the call's JSON object".into()),
        }
    }
}

/// Mistral's output from its first `[TOOL_CALLS]` to the end: sections of calls, each either
/// a JSON array (or object) of calls or one `name[CALL_ID]id[ARGS]{...}` (the id optional),
/// each section after the first optionally opened by its own `[TOOL_CALLS]`. Returns the calls
/// of the sections that parsed and, where a section did not, the offset from which `text` is
/// not calls, with why.
pub(super) fn parse_mistral(text: &str) -> (Vec<ToolCall>, Option<(usize, String)>) {
    parse_sections(text, mistral_section)
}

/// Granite's output from its first `<|tool_call|>` to the end: JSON arrays (or objects) of
/// calls, each after the first optionally opened by its own `<|tool_call|>`; returned as
/// `parse_mistral` returns them.
pub(super) fn parse_granite(text: &str) -> (Vec<ToolCall>, Option<(usize, String)>) {
    parse_sections(text, |section| {
        let body = section.strip_prefix(GRANITE_TOOL_CALL).unwrap_or(section);
        json_section(body.trim_start())
    })
}

/// Phi-4-mini's output from its first call to the end: `functools[...]` lists, and calls (one,
/// or a list) between `<|tool_call|>` and `<|/tool_call|>`, whose closing token may be cut
/// short where the output ends; returned as `parse_mistral` returns them.
pub(super) fn parse_phi4(text: &str) -> (Vec<ToolCall>, Option<(usize, String)>) {
    parse_sections(text, |section| {
        if section.starts_with(FUNCTOOLS) {
            // The list's `[` is the marker's last character.
            let list = &section[FUNCTOOLS.len() - 1..];
            return json_section(list);
        }
        let body = section
            .strip_prefix(GRANITE_TOOL_CALL)
            .ok_or("text after the calls")?;
        let (calls, after) = json_section(body.trim_start())?;
        let after = after.trim_start();
        let after = match after.strip_prefix(PHI_TOOL_CALL_CLOSE) {
            Some(rest) => rest,
            None if PHI_TOOL_CALL_CLOSE.starts_with(after) => "",
            None => after,
        };
        Ok((calls, after))
    })
}

/// `text` cut into `section`s, whitespace between them dropped, until one does not parse.
fn parse_sections(
    text: &str,
    section: impl Fn(&str) -> Result<(Vec<ToolCall>, &str), String>,
) -> (Vec<ToolCall>, Option<(usize, String)>) {
    let mut calls = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let offset = text.len() - rest.len();
        match section(rest) {
            Ok((section, after)) => {
                calls.extend(section);
                rest = after.trim_start();
            }
            Err(why) => return (calls, Some((offset, why))),
        }
    }
    (calls, None)
}

fn mistral_section(text: &str) -> Result<(Vec<ToolCall>, &str), String> {
    let body = text.strip_prefix(TOOL_CALLS).unwrap_or(text).trim_start();
    if body.starts_with(['[', '{']) {
        return json_section(body);
    }
    let args_at = body.find(ARGS).ok_or("no [ARGS] after the tool name")?;
    let head = &body[..args_at];
    let name = head.find(CALL_ID).map_or(head, |at| &head[..at]).trim();
    if !is_tool_name(name) {
        return Err(format!("{name:?} is not a tool name"));
    }
    let (args, after) = json_prefix(&body[args_at + ARGS.len()..])?;
    let call = ToolCall {
        name: name.to_owned(),
        arguments: arguments(Some(args))?,
    };
    Ok((vec![call], after))
}

/// A JSON array of calls, or one call object, at the start of `body`; and the text after it.
fn json_section(body: &str) -> Result<(Vec<ToolCall>, &str), String> {
    let (value, after) = json_prefix(body)?;
    let calls = match value {
        Value::Array(items) if items.is_empty() => return Err("an empty list of calls".into()),
        Value::Array(items) => items
            .into_iter()
            .map(call_from_value)
            .collect::<Result<Vec<_>, _>>()?,
        value => vec![call_from_value(value)?],
    };
    Ok((calls, after))
}

/// OpenAI's tool names, plus `.`: anything else before `[ARGS]` is prose, not a name.
fn is_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// A `{"name": ..., "arguments" | "parameters": ...}` object as a call. Missing or null
/// arguments are an empty object: models write `{"name": "now"}` for a tool without
/// parameters.
pub(super) fn call_from_value(value: Value) -> Result<ToolCall, String> {
    let Value::Object(mut object) = value else {
        return Err("the call is not a JSON object".into());
    };
    let name = match object.remove("name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name,
        _ => return Err("the call has no name".into()),
    };
    let args = object
        .remove("arguments")
        .or_else(|| object.remove("parameters"));
    Ok(ToolCall {
        name,
        arguments: arguments(args)?,
    })
}

/// Arguments as compact JSON; a JSON string holding an object (OpenAI's own encoding, which
/// some models copy) is decoded.
fn arguments(value: Option<Value>) -> Result<String, String> {
    let value = match value {
        None | Some(Value::Null) => return Ok("{}".into()),
        Some(Value::String(encoded)) => serde_json::from_str(&encoded)
            .map_err(|error| format!("the arguments string is not JSON: {error}"))?,
        Some(value) => value,
    };
    match value {
        Value::Object(_) => Ok(value.to_string()),
        _ => Err("the arguments are not a JSON object".into()),
    }
}

/// The JSON value at the start of `text` (after whitespace), and the text after it.
fn json_prefix(text: &str) -> Result<(Value, &str), String> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match values.next() {
        Some(Ok(value)) => Ok((value, text.get(values.byte_offset()..).unwrap_or(""))),
        Some(Err(error)) => Err(format!("invalid JSON: {error}")),
        None => Err("no JSON where a call should be".into()),
    }
}

/// The calls of a section (DeepSeek's, Kimi's) whose body is calls between `begin` and `end`
/// markers, whitespace between them; `parse` reads each call's text. The last call may be left
/// unclosed, as a model that stops right after its arguments leaves it.
pub(super) fn section_calls(
    body: &str,
    (begin, end): (&str, &str),
    parse: fn(&str) -> Result<ToolCall, String>,
) -> Result<Vec<ToolCall>, String> {
    let mut calls = Vec::new();
    let mut rest = body.trim_start();
    while !rest.is_empty() {
        let after = rest
            .strip_prefix(begin)
            .ok_or("text outside the section's calls")?;
        let (call, after) = after
            .split_once(end)
            .unwrap_or_else(|| (&after[..after.len() - held_tail(after, &[end])], ""));
        calls.push(parse(call)?);
        rest = after.trim_start();
    }
    if calls.is_empty() {
        return Err("a section of calls without a call".into());
    }
    Ok(calls)
}

/// A call's arguments written as a JSON object and nothing else, in compact form.
pub(super) fn arguments_text(text: &str) -> Result<String, String> {
    let (value, rest) = json_prefix(text)?;
    if !rest.trim().is_empty() {
        return Err("text after the call's arguments".into());
    }
    arguments(Some(value))
}

/// A function name as a model writes it between markers: one word of its own, no markup.
pub(super) fn function_name(name: &str) -> Result<String, String> {
    let name = name.trim();
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || "<>{}".contains(c)) {
        return Err(format!("{name:?} is not a function name"));
    }
    Ok(name.to_owned())
}
