//! Responses tools as Codex and the Agents SDK send them, onto the chat function tools the
//! worker's templates render, and the model's calls back into the client's own shapes.
//!
//! - `function` tools take chat's nested shape.
//! - `namespace` tools hold function (or custom) tools; each becomes one tool whose name joins
//!   the two as Codex's `canonical_flat_name` does (`mcp__server` + `lookup` →
//!   `mcp__server__lookup`), and a call of it goes back as `{"namespace", "name"}`, the pair
//!   Codex routes on.
//! - `custom` tools take free-form text. To the model each is a function with one string
//!   argument, `input`; a call goes back as a `custom_tool_call` carrying that text. When the
//!   request forces a custom tool, the whole answer is its input, held to the tool's Lark or
//!   regex grammar by constrained decoding.
//! - Hosted tools (web search, file search, code interpreter, MCP...) run on OpenAI's servers.
//!   corral cannot run them, so they are left out of the prompt rather than refused: a client
//!   that sends them by default still gets answers (see `api::hosted_tools`).

use std::collections::HashMap;

use corral_ipc::ToolCall;
use serde_json::{Map, Value, json};

use crate::api::error::ApiError;
use crate::api::hosted_tools::{self, Dropped};

/// A tool as the client named it, which the model's call is reported under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTool {
    pub name: String,
    pub namespace: Option<String>,
    pub custom: bool,
}

/// What the model called, in the client's terms.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientCall {
    Function {
        name: String,
        namespace: Option<String>,
        arguments: String,
    },
    Custom {
        name: String,
        namespace: Option<String>,
        input: String,
    },
}

/// A custom tool the request forces: the answer's whole text is its input.
#[derive(Debug, Clone, PartialEq)]
pub struct ForcedCustom {
    pub tool: ClientTool,
    /// The tool's grammar in llguidance's Lark dialect, when it has one.
    pub grammar: Option<String>,
}

/// A request's tools, translated.
#[derive(Debug, Default)]
pub struct ResponseTools {
    /// Chat-shaped function tools, for the prompt.
    pub chat: Vec<Value>,
    /// Each prompt name's client tool.
    by_prompt_name: HashMap<String, ClientTool>,
    /// Each custom tool's grammar, by prompt name.
    grammars: HashMap<String, Option<String>>,
    pub dropped: Dropped,
    /// The custom tool `tool_choice` forces, once `apply_choice` has read it.
    pub forced: Option<ForcedCustom>,
}

impl ResponseTools {
    /// Translates `tools` and the tools of `additional_tools` input items, in that order.
    /// `field` names where each list came from (`tools`, `input[0].tools`), for errors.
    pub fn translate<'a>(
        lists: impl IntoIterator<Item = (String, &'a [Value])>,
    ) -> Result<Self, ApiError> {
        let mut translated = ResponseTools::default();
        for (field, tools) in lists {
            for (index, tool) in tools.iter().enumerate() {
                translated.add(&format!("{field}[{index}]"), tool, None)?;
            }
        }
        Ok(translated)
    }

    fn add(&mut self, at: &str, tool: &Value, namespace: Option<&str>) -> Result<(), ApiError> {
        let kind = tool
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("function");
        match kind {
            "function" => self.function(at, tool, namespace),
            "custom" => self.custom(at, tool, namespace),
            "namespace" if namespace.is_none() => {
                let name = required_name(at, tool)?;
                let Some(tools) = tool.get("tools").and_then(Value::as_array) else {
                    return Err(ApiError::invalid(
                        format!("{at}.tools must be an array of the namespace's tools"),
                        format!("{at}.tools"),
                    ));
                };
                for (index, inner) in tools.iter().enumerate() {
                    self.add(&format!("{at}.tools[{index}]"), inner, Some(name))?;
                }
                Ok(())
            }
            kind if hosted_tools::is_hosted_responses_tool(kind) => {
                self.dropped.add(kind);
                Ok(())
            }
            kind => Err(ApiError::invalid(
                format!(
                    "{at}.type `{kind}` is not a tool type corral knows; it takes function, \
                     custom and namespace tools, and leaves hosted tools out"
                ),
                format!("{at}.type"),
            )),
        }
    }

    fn function(
        &mut self,
        at: &str,
        tool: &Value,
        namespace: Option<&str>,
    ) -> Result<(), ApiError> {
        let name = required_name(at, tool)?;
        let mut function = Map::new();
        for key in ["description", "parameters", "strict"] {
            if let Some(value) = tool.get(key).filter(|value| !value.is_null()) {
                function.insert(key.to_owned(), value.clone());
            }
        }
        self.push(name, namespace, false, function);
        Ok(())
    }

    fn custom(&mut self, at: &str, tool: &Value, namespace: Option<&str>) -> Result<(), ApiError> {
        let name = required_name(at, tool)?;
        let grammar = custom_grammar(at, tool.get("format"))?;
        let mut function = Map::new();
        if let Some(description) = tool.get("description").filter(|value| !value.is_null()) {
            function.insert("description".to_owned(), description.clone());
        }
        function.insert(
            "parameters".to_owned(),
            json!({
                "type": "object",
                "properties": {"input": {"type": "string", "description": "The tool's input, as free-form text."}},
                "required": ["input"],
                "additionalProperties": false,
            }),
        );
        let prompt_name = self.push(name, namespace, true, function);
        self.grammars.insert(prompt_name, grammar);
        Ok(())
    }

    /// Adds a chat tool under its prompt name; returns that name.
    fn push(
        &mut self,
        name: &str,
        namespace: Option<&str>,
        custom: bool,
        mut function: Map<String, Value>,
    ) -> String {
        let prompt_name = match namespace {
            Some(namespace) => flat_name(namespace, name),
            None => name.to_owned(),
        };
        function.insert("name".to_owned(), Value::String(prompt_name.clone()));
        self.chat
            .push(json!({"type": "function", "function": function}));
        self.by_prompt_name.insert(
            prompt_name.clone(),
            ClientTool {
                name: name.to_owned(),
                namespace: namespace.map(str::to_owned),
                custom,
            },
        );
        prompt_name
    }

    /// The request's `tool_choice` in chat's shape; a custom tool it forces is kept in
    /// `forced` instead. Choosing a hosted tool corral left out forces no call.
    pub fn apply_choice(&mut self, choice: Option<&Value>) -> Result<Option<Value>, ApiError> {
        let Some(choice) = choice else {
            return Ok(None);
        };
        let Some(object) = choice.as_object() else {
            return Ok(Some(choice.clone()));
        };
        let kind = object.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "function" | "custom" => {
                let Some(name) = object.get("name").and_then(Value::as_str) else {
                    return Err(ApiError::invalid(
                        format!("tool_choice of type `{kind}` needs a name"),
                        "tool_choice.name",
                    ));
                };
                let namespace = object.get("namespace").and_then(Value::as_str);
                let prompt_name =
                    namespace.map_or_else(|| name.to_owned(), |ns| flat_name(ns, name));
                let Some(tool) = self.by_prompt_name.get(&prompt_name) else {
                    return Err(ApiError::invalid(
                        format!(
                            "tool_choice names the tool `{prompt_name}`, which is not among the tools"
                        ),
                        "tool_choice",
                    ));
                };
                if tool.custom {
                    let grammar = self.grammars.get(&prompt_name).cloned().flatten();
                    self.forced = Some(ForcedCustom {
                        tool: tool.clone(),
                        grammar,
                    });
                    return Ok(None);
                }
                Ok(Some(
                    json!({"type": "function", "function": {"name": prompt_name}}),
                ))
            }
            // `{"type": "allowed_tools", "mode": "auto" | "required", "tools": [...]}`: the mode
            // holds; every tool stays offered, which keeps the prompt's prefix the same from
            // turn to turn.
            "allowed_tools" => Ok(Some(
                object.get("mode").cloned().unwrap_or_else(|| json!("auto")),
            )),
            kind if hosted_tools::is_hosted_responses_tool(kind) => Ok(None),
            kind => Err(ApiError::invalid(
                format!(
                    "tool_choice has type `{kind}`; it takes a mode, a function, a custom tool or allowed_tools"
                ),
                "tool_choice.type",
            )),
        }
    }

    /// A call the worker parsed, in the client's terms: a namespaced function keeps its
    /// namespace, a custom tool's `input` argument becomes its text.
    pub fn client_call(&self, call: ToolCall) -> ClientCall {
        match self.by_prompt_name.get(&call.name) {
            Some(tool) if tool.custom => ClientCall::Custom {
                name: tool.name.clone(),
                namespace: tool.namespace.clone(),
                input: custom_input(&call.arguments),
            },
            Some(tool) => ClientCall::Function {
                name: tool.name.clone(),
                namespace: tool.namespace.clone(),
                arguments: call.arguments,
            },
            None => ClientCall::Function {
                name: call.name,
                namespace: None,
                arguments: call.arguments,
            },
        }
    }
}

/// The one name a namespaced tool has in the prompt, joined as Codex joins it: the namespace's
/// trailing and the name's leading underscores trimmed, `__` between them.
pub fn flat_name(namespace: &str, name: &str) -> String {
    format!(
        "{}__{}",
        namespace.trim_end_matches('_'),
        name.trim_start_matches('_')
    )
}

/// A custom call's arguments as the model wrote them, `{"input": "..."}`, as the input text;
/// anything else is passed on as written, so nothing the model wrote is lost.
fn custom_input(arguments: &str) -> String {
    serde_json::from_str::<Value>(arguments)
        .ok()
        .and_then(|value| {
            value
                .get("input")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| arguments.to_owned())
}

/// The arguments a custom call's text takes as a function call in the conversation.
pub fn custom_arguments(input: &str) -> String {
    json!({"input": input}).to_string()
}

fn required_name<'a>(at: &str, tool: &'a Value) -> Result<&'a str, ApiError> {
    match tool.get("name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() => Ok(name),
        _ => Err(ApiError::invalid(
            format!("{at} needs a non-empty string `name`"),
            format!("{at}.name"),
        )),
    }
}

/// A custom tool's `format`: `{"type": "text"}` (or none) takes any text;
/// `{"type": "grammar", "syntax": "lark" | "regex", "definition"}` a grammar, as Lark.
fn custom_grammar(at: &str, format: Option<&Value>) -> Result<Option<String>, ApiError> {
    let Some(format) = format.filter(|format| !format.is_null()) else {
        return Ok(None);
    };
    let invalid = |message: String| ApiError::invalid(message, format!("{at}.format"));
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("grammar") => {
            let definition = format
                .get("definition")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(format!("{at}.format needs a string `definition`")))?;
            match format.get("syntax").and_then(Value::as_str) {
                Some("lark") => Ok(Some(definition.to_owned())),
                Some("regex") => Ok(Some(format!("start: /{}/", definition.replace('/', "\\/")))),
                other => Err(invalid(format!(
                    "{at}.format.syntax must be lark or regex, not {}",
                    other.unwrap_or("missing")
                ))),
            }
        }
        other => Err(invalid(format!(
            "{at}.format.type must be text or grammar, not {}",
            other.unwrap_or("missing")
        ))),
    }
}
