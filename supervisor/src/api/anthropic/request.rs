//! A Messages API request, checked and translated into the worker's [`GenerateRequest`]: the
//! same request the OpenAI chat route builds, so templates, tool formats, constrained decoding
//! and the prefix cache work the same for both APIs.
//!
//! Unknown fields are ignored (`metadata`, `service_tier`, ... mean nothing here). Two of
//! corral's extensions on the chat route are honoured: `grammar` (an llguidance Lark grammar)
//! and `seed`, so tests and tools can constrain and repeat output.

use corral_ipc::{GenerateRequest, OutputFormat, Prompt, ToolChoice};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::content;
use super::error::AnthropicError;
use crate::api::hosted_tools::Dropped;
use crate::api::images::Pending;
use crate::api::output_format;
use crate::api::tools::Tools;

/// Anthropic's efforts, passed to the template as `reasoning_effort`.
const EFFORTS: [&str; 5] = ["low", "medium", "high", "xhigh", "max"];

#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    pub model: String,
    /// Required by `/v1/messages`, absent from `count_tokens`; checked by the handler so the 400
    /// names it.
    pub max_tokens: Option<u32>,
    pub messages: Vec<Value>,
    pub system: Option<Value>,
    pub stop_sequences: Option<Vec<String>>,
    pub stream: Option<bool>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub thinking: Option<Value>,
    pub output_config: Option<Value>,
    /// corral's extensions, as on the chat route.
    pub grammar: Option<String>,
    pub seed: Option<u64>,
}

impl MessagesRequest {
    pub fn stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// The worker request, the server tools it left out, and its images still to fetch;
    /// `max_tokens` is the handler's (required, or 1 to count tokens).
    pub fn into_generate(
        self,
        max_tokens: u32,
    ) -> Result<(GenerateRequest, Dropped, Vec<Pending>), AnthropicError> {
        if max_tokens == 0 {
            return Err(AnthropicError::invalid("max_tokens: must be at least 1"));
        }
        let (tools, dropped) = openai_tools(self.tools.unwrap_or_default())?;
        let tools = Tools::check(tools)?;
        let (tool_choice, parallel_tool_calls) = tool_choice(&tools, self.tool_choice.as_ref())?;
        let (format, effort) = output_config(self.output_config.as_ref())?;
        let output_format = match (format, self.grammar.as_deref()) {
            (Some(_), Some(_)) => {
                return Err(AnthropicError::invalid(
                    "send either output_config.format or grammar, not both",
                ));
            }
            (Some(format), None) => Some(format),
            (None, grammar) => output_format::parse(None, grammar)?,
        };
        let conversation = content::messages(self.system.as_ref(), self.messages)?;
        let prompt = Prompt::Chat {
            messages: conversation.messages,
            tools: (!tools.tools.is_empty()).then_some(tools.tools),
            template_kwargs: template_kwargs(self.thinking.as_ref(), effort)?,
            images: Vec::new(),
        };
        let request = GenerateRequest {
            prompt,
            max_tokens: Some(max_tokens),
            temperature: in_range(self.temperature, "temperature")?,
            top_p: in_range(self.top_p, "top_p")?,
            top_k: self
                .top_k
                .map(|k| u32::try_from(k.max(0)).unwrap_or(u32::MAX)),
            min_p: None,
            repetition_penalty: None,
            presence_penalty: None,
            frequency_penalty: None,
            seed: self.seed,
            stop: self.stop_sequences.map(stop_sequences).transpose()?,
            logprobs: None,
            tool_choice,
            parallel_tool_calls,
            output_format,
            count_only: false,
            reasoning_budget: thinking_budget(self.thinking.as_ref())?,
            speculative: None,
        };
        Ok((request, dropped, conversation.images))
    }
}

/// Anthropic's ranges for both are 0 to 1.
fn in_range(value: Option<f32>, name: &str) -> Result<Option<f32>, AnthropicError> {
    match value {
        None => Ok(None),
        Some(value) if (0.0..=1.0).contains(&value) => Ok(Some(value)),
        Some(value) => Err(AnthropicError::invalid(format!(
            "{name}: must be between 0 and 1, got {value}"
        ))),
    }
}

/// Any number of stop sequences (Anthropic sets no limit), none empty.
fn stop_sequences(stops: Vec<String>) -> Result<Vec<String>, AnthropicError> {
    if stops.iter().any(String::is_empty) {
        return Err(AnthropicError::invalid(
            "stop_sequences: a stop sequence must not be empty",
        ));
    }
    Ok(stops)
}

/// Custom tools, `{name, description, input_schema}`, as OpenAI function tools. Anthropic's
/// typed tools (`web_search_…`, `code_execution_…`, `bash_…`) are defined and run by Anthropic's
/// side, so they are left out (`hosted_tools`), never refused: Claude Code may send them.
fn openai_tools(tools: Vec<Value>) -> Result<(Vec<Value>, Dropped), AnthropicError> {
    let mut dropped = Dropped::default();
    let mut functions = Vec::with_capacity(tools.len());
    for (index, tool) in tools.into_iter().enumerate() {
        match tool.get("type") {
            None | Some(Value::Null) => {}
            Some(Value::String(kind)) if kind == "custom" => {}
            Some(Value::String(kind)) => {
                dropped.add(kind);
                continue;
            }
            Some(_) => {
                return Err(AnthropicError::invalid(format!(
                    "tools[{index}].type: must be a string"
                )));
            }
        }
        let mut function = Map::new();
        for (from, to) in [
            ("name", "name"),
            ("description", "description"),
            ("input_schema", "parameters"),
        ] {
            if let Some(value) = tool.get(from) {
                function.insert(to.to_owned(), value.clone());
            }
        }
        functions.push(json!({"type": "function", "function": function}));
    }
    Ok((functions, dropped))
}

/// `{"type": "auto" | "any" | "tool" | "none", "name"?, "disable_parallel_tool_use"?}`.
fn tool_choice(
    tools: &Tools,
    choice: Option<&Value>,
) -> Result<(Option<ToolChoice>, Option<bool>), AnthropicError> {
    let Some(choice) = choice.filter(|choice| !choice.is_null()) else {
        return Ok((None, None));
    };
    let openai = match choice.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => {
            let name = choice.get("name").and_then(Value::as_str).ok_or_else(|| {
                AnthropicError::invalid("tool_choice.name: required for type `tool`")
            })?;
            json!({"type": "function", "function": {"name": name}})
        }
        _ => {
            return Err(AnthropicError::invalid(
                "tool_choice.type: must be one of auto, any, tool, none",
            ));
        }
    };
    let parallel = match choice.get("disable_parallel_tool_use") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(disable)) => Some(!disable),
        Some(_) => {
            return Err(AnthropicError::invalid(
                "tool_choice.disable_parallel_tool_use: must be a boolean",
            ));
        }
    };
    Ok((Some(tools.choice(Some(&openai))?), parallel))
}

/// `output_config`: `format` (`{"type": "json_schema", "schema"}`) and `effort`.
fn output_config(
    config: Option<&Value>,
) -> Result<(Option<OutputFormat>, Option<&str>), AnthropicError> {
    let Some(config) = config.filter(|config| !config.is_null()) else {
        return Ok((None, None));
    };
    let format = match config.get("format") {
        None | Some(Value::Null) => None,
        Some(format) => {
            if format.get("type").and_then(Value::as_str) != Some("json_schema") {
                return Err(AnthropicError::invalid(
                    "output_config.format.type: must be json_schema",
                ));
            }
            let Some(schema @ Value::Object(_)) = format.get("schema") else {
                return Err(AnthropicError::invalid(
                    "output_config.format.schema: must be a JSON schema object",
                ));
            };
            // Anthropic's structured outputs always hold to the schema.
            Some(OutputFormat::JsonSchema {
                schema: schema.clone(),
                strict: true,
            })
        }
    };
    let effort = match config.get("effort") {
        None | Some(Value::Null) => None,
        Some(Value::String(effort)) if EFFORTS.contains(&effort.as_str()) => Some(effort.as_str()),
        Some(_) => {
            return Err(AnthropicError::invalid(format!(
                "output_config.effort: must be one of {}",
                EFFORTS.join(", ")
            )));
        }
    };
    Ok((format, effort))
}

/// `budget_tokens` of enabled thinking: the worker closes the model's reasoning block after that
/// many tokens. Anthropic's minimum of 1024 is not imposed: a local model may think less.
fn thinking_budget(thinking: Option<&Value>) -> Result<Option<u32>, AnthropicError> {
    let Some(thinking) = thinking.filter(|thinking| !thinking.is_null()) else {
        return Ok(None);
    };
    if thinking.get("type").and_then(Value::as_str) != Some("enabled") {
        return Ok(None);
    }
    match thinking.get("budget_tokens") {
        None | Some(Value::Null) => Ok(None),
        Some(budget) => match budget
            .as_u64()
            .and_then(|budget| u32::try_from(budget).ok())
        {
            Some(budget) if budget > 0 => Ok(Some(budget)),
            _ => Err(AnthropicError::invalid(
                "thinking.budget_tokens: must be a positive integer",
            )),
        },
    }
}

/// `thinking` as Qwen3-style templates read it (`enable_thinking`); its budget is
/// `thinking_budget`'s. The effort reaches templates that read `reasoning_effort` (`max` as
/// OpenAI's highest, `xhigh`).
fn template_kwargs(
    thinking: Option<&Value>,
    effort: Option<&str>,
) -> Result<Option<Map<String, Value>>, AnthropicError> {
    let mut kwargs = Map::new();
    if let Some(thinking) = thinking.filter(|thinking| !thinking.is_null()) {
        let enabled = match thinking.get("type").and_then(Value::as_str) {
            Some("enabled" | "adaptive") => true,
            Some("disabled") => false,
            _ => {
                return Err(AnthropicError::invalid(
                    "thinking.type: must be one of enabled, adaptive, disabled",
                ));
            }
        };
        kwargs.insert("enable_thinking".to_owned(), enabled.into());
    }
    if let Some(effort) = effort {
        let effort = if effort == "max" { "xhigh" } else { effort };
        kwargs.insert("reasoning_effort".to_owned(), effort.into());
    }
    Ok((!kwargs.is_empty()).then_some(kwargs))
}
