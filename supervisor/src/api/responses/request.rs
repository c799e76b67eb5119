//! `POST /v1/responses`'s body and its translation into the chat-shaped worker request the
//! other endpoints send: instructions become a system message, tools take chat's shape
//! (`tools.rs`), `text.format` becomes a `response_format`, `reasoning.effort` the template's
//! `reasoning_effort`. Validation reuses chat's checks, so both APIs refuse the same things.
//! Fields that only steer OpenAI's service (`include`, `prompt_cache_key`, `service_tier`,
//! `text.verbosity`, `reasoning.summary`, `client_metadata`...) are accepted and have no effect.

use std::sync::Arc;

use corral_ipc::{GenerateRequest, Prompt, ToolChoice};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::items::{self, Input};
use super::object::Echo;
use super::store::ResponseStore;
use super::tools::ResponseTools;
use crate::api::chat::template_kwargs;
use crate::api::error::ApiError;
use crate::api::images::Pending;
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
    pub conversation: Vec<Arc<Value>>,
    pub stream: bool,
    /// How the model's calls go back to the client, and what was left out.
    pub tools: ResponseTools,
    /// The prompt's images still to fetch.
    pub images: Vec<Pending>,
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
        let response_tools = self.tools.unwrap_or_default();
        let mut tools = ResponseTools::translate(
            std::iter::once(("tools".to_owned(), response_tools.as_slice()))
                .chain(additional_tools(&input)),
        )?;
        let choice = tools.apply_choice(self.tool_choice.as_ref())?;
        let input = items::messages(input)?;
        if input.messages.is_empty() && conversation.is_empty() {
            return Err(ApiError::invalid(
                "input must hold at least one item",
                "input",
            ));
        }
        conversation.extend(input.messages.into_iter().map(Arc::new));
        let mut prompt_messages = Vec::with_capacity(conversation.len() + 1);
        if let Some(instructions) = &self.instructions {
            prompt_messages.push(json!({"role": "system", "content": instructions}));
        }
        prompt_messages.extend(conversation.iter().map(|message| Value::clone(message)));

        let checked = Tools::check(tools.chat.clone())?;
        // `None` lets the model's default tool_choice apply. A forced custom tool's input is the
        // whole answer: under its grammar the tools stay described to the model (an output
        // format keeps the default away); without one, no call may be parsed out of the text.
        let tool_choice = match (&tools.forced, choice) {
            (Some(forced), _) if forced.grammar.is_some() => Some(ToolChoice::Auto),
            (Some(_), _) => Some(ToolChoice::None),
            (None, choice) => choice
                .map(|choice| checked.choice(Some(&choice)))
                .transpose()?,
        };
        let effort = self.reasoning.and_then(|reasoning| reasoning.effort);
        let normalized = messages::normalize(prompt_messages)?;
        let mut images = normalized.images;
        // This input's images come last; they are named by their place in `input`. A previous
        // response's keep their place in the prompt's messages.
        let first_new = images.len().saturating_sub(input.image_locations.len());
        for (image, location) in images[first_new..].iter_mut().zip(input.image_locations) {
            image.location = location;
        }
        let prompt = Prompt::Chat {
            messages: normalized.messages,
            tools: (!checked.tools.is_empty()).then_some(checked.tools),
            template_kwargs: template_kwargs(None, effort.clone())?,
            images: Vec::new(),
        };
        let format = self.text.and_then(|text| text.format);
        let grammar = tools
            .forced
            .as_ref()
            .and_then(|forced| forced.grammar.clone());
        if grammar.is_some() && format.is_some() {
            return Err(ApiError::invalid(
                "text.format cannot be combined with a tool_choice that forces a custom tool \
                 with a grammar: the tool's grammar shapes the answer",
                "text.format",
            ));
        }
        let params = SamplingParams {
            model: self.model,
            temperature: self.temperature,
            top_p: self.top_p,
            response_format: format.as_ref().map(chat_response_format),
            grammar,
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
            tools,
            images,
        })
    }
}

/// The tool lists of `additional_tools` input items, named by where they are.
fn additional_tools(input: &Input) -> Vec<(String, &[Value])> {
    let Input::Items(items) = input else {
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter(|(_, item)| item.get("type").and_then(Value::as_str) == Some("additional_tools"))
        .filter_map(|(index, item)| {
            let tools = item.get("tools")?.as_array()?;
            Some((format!("input[{index}].tools"), tools.as_slice()))
        })
        .collect()
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
