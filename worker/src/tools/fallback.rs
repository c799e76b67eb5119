//! Tools for a model whose chat template does not render them (a plain ChatML template, as
//! SmolLM2's): corral rewrites the conversation into plain messages that teach the Hermes
//! format, with the words Qwen2.5's template uses, so the output parser reads the answer as it
//! would a Hermes model's. Tool schemas go into the system message; past calls become the
//! assistant's text; tool results become user turns in plain words ("The tool get_weather
//! returned: ..."): a model never trained on tools answers from those, where Hermes'
//! `<tool_response>` tags only made SmolLM2 repeat them.

use std::io;

use serde_json::ser::{Formatter, Serializer};
use serde_json::{Map, Value};

use super::markers::{TOOL_CALL_CLOSE, TOOL_CALL_OPEN};

const TOOLS_INTRO: &str = "# Tools\n\nYou may call one or more functions to assist with the \
user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>";

const TOOLS_OUTRO: &str = "</tools>\n\nFor each function call, return a json object with \
function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";

/// `messages` (OpenAI chat messages, content a string or null) with `tools` described in the
/// system message and every tool call and result turned into text.
pub fn rewrite_messages(messages: &[Value], tools: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    // Whether the last message out holds tool results, which the next result joins.
    let mut results_open = false;
    // The names of the calls made so far, by id, to name the tool whose result comes back.
    let mut call_names: Vec<(String, String)> = Vec::new();
    for message in messages {
        let is_result = role(message) == Some("tool");
        match role(message) {
            Some("assistant") if message.get("tool_calls").is_some() => {
                call_names.extend(call_ids_and_names(message));
                out.push(assistant_text(message));
            }
            Some("tool") => {
                let id = message.get("tool_call_id").and_then(Value::as_str);
                let name = call_names
                    .iter()
                    .find(|(call_id, _)| Some(call_id.as_str()) == id)
                    .map(|(_, name)| name.as_str())
                    .or_else(|| message.get("name").and_then(Value::as_str));
                let content = text_of(message.get("content"));
                let response = match name {
                    Some(name) => format!("The tool {name} returned: {content}"),
                    None => format!("The tool returned: {content}"),
                };
                match out.last_mut() {
                    Some(previous) if results_open => append(previous, &response),
                    _ => out.push(serde_json::json!({"role": "user", "content": response})),
                }
            }
            _ => out.push(message.clone()),
        }
        results_open = is_result;
    }
    if !tools.is_empty() {
        describe_tools(&mut out, tools);
    }
    out
}

fn call_ids_and_names(message: &Value) -> impl Iterator<Item = (String, String)> + '_ {
    let calls = message.get("tool_calls").and_then(Value::as_array);
    calls.into_iter().flatten().filter_map(|call| {
        let id = call.get("id")?.as_str()?;
        let function = call.get("function").unwrap_or(call);
        let name = function.get("name")?.as_str()?;
        Some((id.to_owned(), name.to_owned()))
    })
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

pub(super) fn text_of(content: Option<&Value>) -> String {
    match content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

/// Appends `text` on a new line to a message's content.
fn append(message: &mut Value, text: &str) {
    let mut content = text_of(message.get("content"));
    if !content.is_empty() {
        content.push('\n');
    }
    content.push_str(text);
    if let Some(object) = message.as_object_mut() {
        object.insert("content".into(), content.into());
    }
}

/// The assistant's content, then one `<tool_call>` block per call, as Qwen2.5 renders them.
fn assistant_text(message: &Value) -> Value {
    let mut text = text_of(message.get("content"));
    let calls = message.get("tool_calls").and_then(Value::as_array);
    for call in calls.into_iter().flatten() {
        let function = call.get("function").unwrap_or(call);
        let name = function.get("name").cloned().unwrap_or(Value::Null);
        let arguments = call_arguments(function);
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!(
            "{TOOL_CALL_OPEN}\n{{\"name\": {}, \"arguments\": {}}}\n{TOOL_CALL_CLOSE}",
            python_json(&name),
            python_json(&arguments)
        ));
    }
    let mut object = message.as_object().cloned().unwrap_or_default();
    object.remove("tool_calls");
    object.insert("content".into(), text.into());
    Value::Object(object)
}

/// A past call's arguments as the model should see them: OpenAI sends them as a JSON string,
/// which is decoded to its object.
pub(super) fn call_arguments(function: &Value) -> Value {
    match function.get("arguments") {
        Some(Value::String(encoded)) => {
            serde_json::from_str(encoded).unwrap_or_else(|_| Value::String(encoded.clone()))
        }
        Some(value) => value.clone(),
        None => Value::Object(Map::new()),
    }
}

/// Appends the tool descriptions to the first system message, or adds one in front.
fn describe_tools(messages: &mut Vec<Value>, tools: &[Value]) {
    let mut description = String::from(TOOLS_INTRO);
    for tool in tools {
        description.push('\n');
        description.push_str(&python_json(tool));
    }
    description.push('\n');
    description.push_str(TOOLS_OUTRO);
    match messages.iter_mut().find(|m| role(m) == Some("system")) {
        Some(system) => {
            let mut content = text_of(system.get("content"));
            if !content.is_empty() {
                content.push_str("\n\n");
            }
            content.push_str(&description);
            if let Some(object) = system.as_object_mut() {
                object.insert("content".into(), content.into());
            }
        }
        None => {
            let system = serde_json::json!({"role": "system", "content": description});
            messages.insert(0, system);
        }
    }
}

/// JSON as Python's `json.dumps` writes it (`{"a": 1, "b": [1, 2]}`), which is what the
/// templates' `tojson` put in front of models in training.
pub(super) fn python_json(value: &Value) -> String {
    let mut bytes = Vec::new();
    let mut serializer = Serializer::with_formatter(&mut bytes, PythonSeparators);
    // Writing a `Value` to memory cannot fail, and serde_json writes UTF-8.
    if serde::Serialize::serialize(value, &mut serializer).is_err() {
        return value.to_string();
    }
    String::from_utf8(bytes).unwrap_or_else(|_| value.to_string())
}

/// Compact JSON with a space after `,` and `:`.
struct PythonSeparators;

impl Formatter for PythonSeparators {
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }
}

/// `", "` before every item but the first, in arrays and objects alike.
fn item_separator<W: ?Sized + io::Write>(writer: &mut W, first: bool) -> io::Result<()> {
    if first {
        Ok(())
    } else {
        writer.write_all(b", ")
    }
}
