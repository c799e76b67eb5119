//! Qwen3-Coder's XML calls. Parameter values are written bare (`<parameter=n>\n5\n</parameter>`),
//! so their JSON type comes from the tool's schema, as vLLM's and llama.cpp's parsers do: a
//! `string` parameter stays text even when it looks like a number.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::fragment::ToolCall;
use super::markers::{FUNCTION_CLOSE, FUNCTION_OPEN, PARAMETER_CLOSE, PARAMETER_OPEN};

/// How a declared parameter's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Declared {
    Text,
    Boolean,
    /// Numbers, objects, arrays, null: parsed as JSON, text when it does not parse.
    Json,
}

/// Each tool's parameter types, from the request's OpenAI tool objects.
#[derive(Debug, Default)]
pub(super) struct ParamTypes(HashMap<String, HashMap<String, Declared>>);

impl ParamTypes {
    /// Reads `{"type": "function", "function": {"name", "parameters": {"properties"}}}` (or the
    /// inner object alone); anything not shaped so declares nothing.
    pub(super) fn from_tools(tools: &[Value]) -> Self {
        let mut types = HashMap::new();
        for tool in tools {
            let function = tool.get("function").unwrap_or(tool);
            let Some(name) = function.get("name").and_then(Value::as_str) else {
                continue;
            };
            let properties = function
                .get("parameters")
                .and_then(|p| p.get("properties"))
                .and_then(Value::as_object);
            let params = properties
                .into_iter()
                .flatten()
                .filter_map(|(key, schema)| Some((key.clone(), declared(schema.get("type")?)?)))
                .collect();
            types.insert(name.to_owned(), params);
        }
        Self(types)
    }

    pub(super) fn get(&self, tool: &str, param: &str) -> Option<Declared> {
        self.0.get(tool)?.get(param).copied()
    }
}

/// A schema `type`, or a list of them (`["string", "null"]`): any string type keeps the text.
fn declared(schema_type: &Value) -> Option<Declared> {
    let names: Vec<&str> = match schema_type {
        Value::String(name) => vec![name],
        Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
        _ => return None,
    };
    if names.contains(&"string") {
        Some(Declared::Text)
    } else if names == ["boolean"] {
        Some(Declared::Boolean)
    } else {
        Some(Declared::Json)
    }
}

/// `<function=NAME>` then `<parameter=KEY>\nVALUE\n</parameter>` blocks, then `</function>`.
/// A missing `</function>` or `</parameter>` is tolerated (a value then ends at the next
/// `<parameter=` or at the end), since a model can stop right after its last value.
pub(super) fn parse_function(text: &str, types: &ParamTypes) -> Result<ToolCall, String> {
    let rest = text
        .trim()
        .strip_prefix(FUNCTION_OPEN)
        .ok_or("no <function=...> in the call")?;
    let (name, rest) = rest
        .split_once('>')
        .ok_or("the function name is not closed")?;
    let name = name.trim();
    if name.is_empty() || name.contains(['<', '\n']) {
        return Err(format!("{name:?} is not a function name"));
    }
    let rest = rest.trim_end();
    let mut rest = rest.strip_suffix(FUNCTION_CLOSE).unwrap_or(rest);
    let mut arguments = Map::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let after = rest
            .strip_prefix(PARAMETER_OPEN)
            .ok_or("text outside the function's parameters")?;
        let (key, after) = after
            .split_once('>')
            .ok_or("a parameter name is not closed")?;
        let key = key.trim();
        if key.is_empty() {
            return Err("a parameter has no name".into());
        }
        let end = [PARAMETER_CLOSE, PARAMETER_OPEN]
            .iter()
            .filter_map(|marker| after.find(marker))
            .min()
            .unwrap_or(after.len());
        let value = convert(trim_one_newline(&after[..end]), types.get(name, key));
        arguments.insert(key.to_owned(), value);
        rest = &after[end..];
        rest = rest.strip_prefix(PARAMETER_CLOSE).unwrap_or(rest);
    }
    Ok(ToolCall {
        name: name.to_owned(),
        arguments: Value::Object(arguments).to_string(),
    })
}

/// The template writes each value between newlines; a value's own newlines stay.
fn trim_one_newline(value: &str) -> &str {
    let value = value.strip_prefix('\n').unwrap_or(value);
    value.strip_suffix('\n').unwrap_or(value)
}

/// A parameter the schema does not declare is read as JSON when it parses, else as text.
pub(super) fn convert(value: &str, declared: Option<Declared>) -> Value {
    let text = || Value::String(value.to_owned());
    match declared {
        Some(Declared::Text) => text(),
        Some(Declared::Boolean) if value.trim().eq_ignore_ascii_case("true") => Value::Bool(true),
        Some(Declared::Boolean) if value.trim().eq_ignore_ascii_case("false") => Value::Bool(false),
        Some(Declared::Boolean | Declared::Json) | None => {
            serde_json::from_str(value).unwrap_or_else(|_| text())
        }
    }
}
