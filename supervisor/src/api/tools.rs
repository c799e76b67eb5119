//! Tools in OpenAI's chat API: checking `tools` and `tool_choice` before anything starts, and
//! the shapes of the calls a model made (`message.tool_calls`, and the deltas of a stream).
//!
//! The worker parses calls out of its model's own format and sends them whole; this module only
//! names them (`call_…` ids) and shapes them. Whether a model's format can express several calls
//! is the worker's to say, so `parallel_tool_calls` passes through.

use corral_ipc::{ToolCall, ToolChoice};
use serde::Serialize;
use serde_json::Value;

use super::error::ApiError;
use super::types::response_id;

/// OpenAI's rule for function names: what every tool-call format can carry without escaping.
const MAX_NAME_LEN: usize = 64;

/// The tools of a request, checked, and the names a `tool_choice` may refer to.
pub struct Tools {
    pub tools: Vec<Value>,
    names: Vec<String>,
}

impl Tools {
    /// Checks each tool's shape: `{"type": "function", "function": {"name", "parameters"?}}`.
    pub fn check(tools: Vec<Value>) -> Result<Self, ApiError> {
        let names = tools
            .iter()
            .enumerate()
            .map(|(index, tool)| tool_name(index, tool))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Tools { tools, names })
    }

    /// Parses `tool_choice`: `"auto"`, `"none"`, `"required"`, or a named function, which must be
    /// one of the tools.
    pub fn choice(&self, value: Option<&Value>) -> Result<ToolChoice, ApiError> {
        let invalid = |message: String| ApiError::invalid(message, "tool_choice");
        let choice = match value {
            None | Some(Value::Null) => return Ok(ToolChoice::Auto),
            Some(Value::String(mode)) => match mode.as_str() {
                "auto" => ToolChoice::Auto,
                "none" => ToolChoice::None,
                "required" => ToolChoice::Required,
                other => {
                    return Err(invalid(format!(
                        "tool_choice `{other}` is not one of auto, none, required, \
                         or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"
                    )));
                }
            },
            Some(Value::Object(named)) => {
                let name = named
                    .get("function")
                    .and_then(|function| function.get("name"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        invalid(
                            "tool_choice must name a function: \
                             {\"type\": \"function\", \"function\": {\"name\": ...}}"
                                .to_owned(),
                        )
                    })?;
                if !self.names.iter().any(|known| known == name) {
                    return Err(invalid(format!(
                        "tool_choice names the function `{name}`, which is not among the tools"
                    )));
                }
                ToolChoice::Function {
                    name: name.to_owned(),
                }
            }
            Some(_) => {
                return Err(invalid(
                    "tool_choice must be a string or an object".to_owned(),
                ));
            }
        };
        let forces_call = matches!(choice, ToolChoice::Required | ToolChoice::Function { .. });
        if forces_call && self.tools.is_empty() {
            return Err(invalid(
                "tool_choice asks for a tool call, but the request has no tools".to_owned(),
            ));
        }
        Ok(choice)
    }
}

fn tool_name(index: usize, tool: &Value) -> Result<String, ApiError> {
    let field = |name: &str| format!("tools[{index}].{name}");
    let kind = tool.get("type").and_then(Value::as_str);
    if kind != Some("function") {
        return Err(ApiError::invalid(
            format!("tools[{index}] must have \"type\": \"function\", the only kind supported"),
            field("type"),
        ));
    }
    let Some(function) = tool.get("function").and_then(Value::as_object) else {
        return Err(ApiError::invalid(
            format!("tools[{index}].function must be an object with a name"),
            field("function"),
        ));
    };
    let name = match function.get("name") {
        Some(Value::String(name)) if valid_name(name) => name.clone(),
        Some(Value::String(name)) => {
            return Err(ApiError::invalid(
                format!(
                    "tools[{index}].function.name `{name}` must be 1 to {MAX_NAME_LEN} letters, \
                     digits, underscores or dashes"
                ),
                field("function.name"),
            ));
        }
        _ => {
            return Err(ApiError::invalid(
                format!("tools[{index}].function has no name"),
                field("function.name"),
            ));
        }
    };
    match function.get("parameters") {
        None | Some(Value::Object(_)) => Ok(name),
        Some(_) => Err(ApiError::invalid(
            format!("tools[{index}].function.parameters must be a JSON schema object"),
            field("function.parameters"),
        )),
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

/// A call in a chat message: `{"id", "type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug, Serialize)]
pub struct MessageToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

#[derive(Debug, Serialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

impl MessageToolCall {
    pub fn new(call: ToolCall) -> Self {
        MessageToolCall {
            id: call_id(),
            kind: "function",
            function: FunctionCall {
                name: call.name,
                arguments: call.arguments,
            },
        }
    }
}

/// A fresh `call_…` id; ids only need to be unique within the conversation.
pub fn call_id() -> String {
    response_id("call").replacen('-', "_", 1)
}

/// One entry of a stream delta's `tool_calls`: the first for a call carries its id, type and
/// name (with empty arguments), the next its arguments.
#[derive(Debug, Serialize)]
pub struct ToolCallDelta {
    pub index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

#[derive(Debug, Serialize)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

/// A whole call as the two deltas OpenAI's clients assemble: the opening, then the arguments.
pub fn call_deltas(call: ToolCall) -> [ToolCallDelta; 2] {
    [
        ToolCallDelta {
            index: call.index,
            id: Some(call_id()),
            kind: Some("function"),
            function: FunctionDelta {
                name: Some(call.name),
                arguments: String::new(),
            },
        },
        ToolCallDelta {
            index: call.index,
            id: None,
            kind: None,
            function: FunctionDelta {
                name: None,
                arguments: call.arguments,
            },
        },
    ]
}
