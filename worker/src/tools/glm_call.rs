//! GLM-4.5's calls: `<tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n...
//! </tool_call>`. Values are written bare, as Qwen3-Coder's are, so they are typed the same way
//! (`xml_call::convert`): by the tool's schema, else JSON when they parse, else text.

use serde_json::{Map, Value};

use super::fragment::ToolCall;
use super::markers::{ARG_KEY_CLOSE, ARG_KEY_OPEN, ARG_VALUE_CLOSE, ARG_VALUE_OPEN};
use super::xml_call::{self, ParamTypes};

/// The body of a `<tool_call>` block, between the markers.
pub(super) fn parse_call(body: &str, types: &ParamTypes) -> Result<ToolCall, String> {
    let body = body.trim();
    let name_end = body.find(ARG_KEY_OPEN).unwrap_or(body.len());
    let name = body[..name_end].trim();
    if name.is_empty() || name.contains(['<', '>', '\n', '{']) {
        return Err(format!("{name:?} is not a function name"));
    }
    let mut rest = &body[name_end..];
    let mut arguments = Map::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let after = rest
            .strip_prefix(ARG_KEY_OPEN)
            .ok_or("text outside the call's arguments")?;
        let (key, after) = after
            .split_once(ARG_KEY_CLOSE)
            .ok_or("an argument name is not closed")?;
        let key = key.trim();
        if key.is_empty() {
            return Err("an argument has no name".into());
        }
        let after = after
            .trim_start()
            .strip_prefix(ARG_VALUE_OPEN)
            .ok_or_else(|| format!("no value for the argument {key:?}"))?;
        // A model that stops right after its last value leaves it unclosed.
        let (value, after) = after.split_once(ARG_VALUE_CLOSE).unwrap_or((after, ""));
        let value = xml_call::convert(value, types.get(name, key));
        arguments.insert(key.to_owned(), value);
        rest = after;
    }
    Ok(ToolCall {
        name: name.to_owned(),
        arguments: Value::Object(arguments).to_string(),
    })
}
