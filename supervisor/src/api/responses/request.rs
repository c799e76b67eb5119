//! `POST /v1/responses`'s body and its translation into the chat-shaped worker request the
//! other endpoints send: instructions become a system message, flat function tools take chat's
//! nested shape, `text.format` becomes a `response_format`, `reasoning.effort` the template's
//! `reasoning_effort`. Validation reuses chat's checks, so both APIs refuse the same things.

use corral_ipc::{GenerateRequest, Prompt};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::items::{self, Input};
use super::object::Echo;
use super::store::ResponseStore;
use crate::api::chat::template_kwargs;
use crate::api::error::ApiError;
use crate::api::messages;
use crate::api::sampling::SamplingParams;
use crate::api::tools::Tools;

#[derive(Debug, Deserialize)]
pub struct CreateRequest {
    pub model: String,
    input: Option<Input>,
    instructions: Option<String>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    max_output_tokens: Option<u32>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    text: Option<TextConfig>,
    reasoning: Option<ReasoningConfig>,
    stream: Option<bool>,
    store: Option<bool>,
    previous_response_id: Option<String>,
    metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Deserialize)]
struct TextConfig {
    format: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ReasoningConfig {
    effort: Option<String>,
}

/// A checked request: what the worker runs, and what the response and the store need.
pub struct Prepared {
    pub generate: GenerateRequest,
    pub echo: Echo,
    /// The conversation so far, without instructions: the previous response's, then this input.
    pub conversation: Vec<Value>,
    pub stream: bool,
}

impl CreateRequest {
    pub fn prepare(self, store: &ResponseStore) -> Result<Prepared, ApiError> {
        let input = self
            .input
            .ok_or_else(|| ApiError::invalid("input is required", "input"))?;
        let mut conversation = match &self.previous_response_id {
            Some(id) => {
                store
                    .get(id)
                    .ok_or_else(|| ApiError::PreviousResponseNotFound(id.clone()))?
                    .conversation
            }
            None => Vec::new(),
        };
        let input = items::messages(input)?;
        if input.is_empty() && conversation.is_empty() {
            return Err(ApiError::invalid(
                "input must hold at least one item",
                "input",
            ));
        }
        conversation.extend(input);
        let mut prompt_messages = Vec::with_capacity(conversation.len() + 1);
        if let Some(instructions) = &self.instructions {
            prompt_messages.push(json!({"role": "system", "content": instructions}));
        }
        prompt_messages.extend(conversation.iter().cloned());

        let response_tools = self.tools.unwrap_or_default();
        let tools = Tools::check(chat_tools(&response_tools)?)?;
        let tool_choice = chat_tool_choice(self.tool_choice.as_ref())
            .map(|choice| tools.choice(Some(&choice)))
            .transpose()?;
        let effort = self.reasoning.and_then(|reasoning| reasoning.effort);
        let prompt = Prompt::Chat {
            messages: messages::normalize(prompt_messages)?,
            tools: (!tools.tools.is_empty()).then_some(tools.tools),
            template_kwargs: template_kwargs(None, effort.clone())?,
        };
        let format = self.text.and_then(|text| text.format);
        let params = SamplingParams {
            model: self.model,
            temperature: self.temperature,
            top_p: self.top_p,
            response_format: format.as_ref().map(chat_response_format),
            ..SamplingParams::default()
        };
        let max_tokens = self.max_output_tokens;
        let mut generate = params.build_request(prompt, max_tokens, None)?;
        generate.tool_choice = tool_choice;
        generate.parallel_tool_calls = self.parallel_tool_calls;
        let echo = Echo {
            instructions: self.instructions,
            max_output_tokens: self.max_output_tokens,
            metadata: self.metadata.unwrap_or_default(),
            parallel_tool_calls: self.parallel_tool_calls.unwrap_or(true),
            previous_response_id: self.previous_response_id,
            reasoning: json!({"effort": effort, "summary": null}),
            store: self.store.unwrap_or(true),
            temperature: self.temperature,
            text: json!({"format": format.unwrap_or_else(|| json!({"type": "text"}))}),
            tool_choice: self.tool_choice.unwrap_or_else(|| json!("auto")),
            tools: response_tools,
            top_p: self.top_p,
            truncation: "disabled",
        };
        Ok(Prepared {
            generate,
            echo,
            conversation,
            stream: self.stream.unwrap_or(false),
        })
    }
}

/// Responses function tools are flat (`{"type": "function", "name", "parameters", ...}`);
/// chat's nest the function. Other tool types (web search, files) need OpenAI's servers.
fn chat_tools(tools: &[Value]) -> Result<Vec<Value>, ApiError> {
    tools
        .iter()
        .enumerate()
        .map(|(index, tool)| {
            let kind = tool.get("type").and_then(Value::as_str).unwrap_or("none");
            if kind != "function" {
                return Err(ApiError::invalid(
                    format!("tools[{index}] has type `{kind}`; only function tools are supported"),
                    format!("tools[{index}].type"),
                ));
            }
            let mut function = Map::new();
            for key in ["name", "description", "parameters", "strict"] {
                if let Some(value) = tool.get(key).filter(|value| !value.is_null()) {
                    function.insert(key.to_owned(), value.clone());
                }
            }
            Ok(json!({"type": "function", "function": function}))
        })
        .collect()
}

/// `{"type": "function", "name"}` in chat's shape; the modes pass as they are.
fn chat_tool_choice(choice: Option<&Value>) -> Option<Value> {
    let choice = choice?;
    match choice.get("name") {
        Some(name) if choice.get("type") == Some(&json!("function")) => {
            Some(json!({"type": "function", "function": {"name": name}}))
        }
        _ => Some(choice.clone()),
    }
}

/// `text.format` in chat's `response_format` shape: json_schema's fields sit beside its type.
fn chat_response_format(format: &Value) -> Value {
    if format.get("type") != Some(&json!("json_schema")) {
        return format.clone();
    }
    let mut spec = format.clone();
    if let Some(spec) = spec.as_object_mut() {
        spec.remove("type");
    }
    json!({"type": "json_schema", "json_schema": spec})
}
