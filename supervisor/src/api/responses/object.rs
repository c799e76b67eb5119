//! The `response` object: what `POST /v1/responses` answers, what a stream's lifecycle events
//! carry, and what the store keeps for `GET`. Its output items are built once, with their ids,
//! so a stream's items and its final object agree (the SDK checks that they do).

use corral_ipc::{FinishReason, ToolCall, Usage};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::tools::{ClientCall, ForcedCustom, ResponseTools, custom_arguments, flat_name};
use crate::api::tools::call_id;
use crate::api::types::{response_id, unix_now};

/// An OpenAI-style id: `resp_…`, `msg_…`, `fc_…`, `ctc_…`, `rs_…`.
pub fn item_id(prefix: &str) -> String {
    response_id(prefix).replacen('-', "_", 1)
}

#[derive(Debug, Clone, Serialize)]
pub struct ResponseObject {
    pub id: String,
    pub object: &'static str,
    pub created_at: u64,
    pub status: Status,
    pub error: Option<ResponseError>,
    pub incomplete_details: Option<IncompleteDetails>,
    pub model: String,
    pub output: Vec<OutputItem>,
    pub usage: Option<ResponseUsage>,
    /// The request's settings, echoed as OpenAI does.
    #[serde(flatten)]
    pub echo: Echo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    InProgress,
    Completed,
    Incomplete,
    Failed,
}

#[derive(Debug, Clone, Serialize)]
pub struct ResponseError {
    pub code: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct IncompleteDetails {
    pub reason: &'static str,
}

/// The request fields a response reports back.
#[derive(Debug, Clone, Serialize)]
pub struct Echo {
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u32>,
    pub metadata: Map<String, Value>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub reasoning: Value,
    pub store: bool,
    pub temperature: Option<f32>,
    pub text: Value,
    pub tool_choice: Value,
    pub tools: Vec<Value>,
    pub top_p: Option<f32>,
    pub truncation: &'static str,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    /// The model's thinking, as its full text (`content`); corral writes no summaries.
    Reasoning {
        id: String,
        summary: Vec<Value>,
        content: Vec<ReasoningText>,
        status: &'static str,
    },
    Message {
        id: String,
        role: &'static str,
        status: &'static str,
        content: Vec<OutputText>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        arguments: String,
        status: &'static str,
    },
    /// A call of a custom tool: free-form text, not JSON arguments.
    CustomToolCall {
        id: String,
        call_id: String,
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        input: String,
        status: &'static str,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct ReasoningText {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct OutputText {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
    pub annotations: Vec<Value>,
}

impl OutputItem {
    pub fn reasoning(id: String, text: String) -> Self {
        OutputItem::Reasoning {
            id,
            summary: Vec::new(),
            content: vec![ReasoningText {
                kind: "reasoning_text",
                text,
            }],
            status: "completed",
        }
    }

    pub fn message(id: String, text: String, status: &'static str) -> Self {
        OutputItem::Message {
            id,
            role: "assistant",
            status,
            content: vec![output_text(text)],
        }
    }

    /// A whole call, as the worker sends it, in the client's terms, with fresh item and call ids.
    pub fn call(call: ToolCall, tools: &ResponseTools) -> Self {
        match tools.client_call(call) {
            ClientCall::Function {
                name,
                namespace,
                arguments,
            } => OutputItem::FunctionCall {
                id: item_id("fc"),
                call_id: call_id(),
                name,
                namespace,
                arguments,
                status: "completed",
            },
            ClientCall::Custom {
                name,
                namespace,
                input,
            } => Self::custom_call(item_id("ctc"), name, namespace, input),
        }
    }

    pub fn custom_call(id: String, name: String, namespace: Option<String>, input: String) -> Self {
        OutputItem::CustomToolCall {
            id,
            call_id: call_id(),
            name,
            namespace,
            input,
            status: "completed",
        }
    }

    /// A forced custom tool's call, whose input is the answer's whole text.
    pub fn forced_call(id: String, forced: &ForcedCustom, input: String) -> Self {
        Self::custom_call(
            id,
            forced.tool.name.clone(),
            forced.tool.namespace.clone(),
            input,
        )
    }
}

pub fn output_text(text: String) -> OutputText {
    OutputText {
        kind: "output_text",
        text,
        annotations: Vec::new(),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ResponseUsage {
    pub input_tokens: u32,
    pub input_tokens_details: Value,
    pub output_tokens: u32,
    pub output_tokens_details: Value,
    pub total_tokens: u32,
}

impl From<Usage> for ResponseUsage {
    fn from(usage: Usage) -> Self {
        ResponseUsage {
            input_tokens: usage.prompt_tokens,
            input_tokens_details: json!({
                "cached_tokens": usage.cached_tokens, "cache_write_tokens": 0,
            }),
            output_tokens: usage.completion_tokens,
            // The worker does not count thinking tokens apart from the answer's.
            output_tokens_details: json!({"reasoning_tokens": 0}),
            total_tokens: usage.prompt_tokens.saturating_add(usage.completion_tokens),
        }
    }
}

impl ResponseObject {
    /// A response that has started and has no output yet.
    pub fn in_progress(model: String, echo: Echo) -> Self {
        ResponseObject {
            id: item_id("resp"),
            object: "response",
            created_at: unix_now(),
            status: Status::InProgress,
            error: None,
            incomplete_details: None,
            model,
            output: Vec::new(),
            usage: None,
            echo,
        }
    }

    /// Ends the response with the worker's finish: `incomplete` when it ran out of tokens.
    pub fn finish(&mut self, output: Vec<OutputItem>, reason: FinishReason, usage: Usage) {
        self.output = output;
        self.usage = Some(usage.into());
        if reason == FinishReason::Length {
            self.status = Status::Incomplete;
            self.incomplete_details = Some(IncompleteDetails {
                reason: "max_output_tokens",
            });
        } else {
            self.status = Status::Completed;
        }
    }

    pub fn fail(&mut self, output: Vec<OutputItem>, message: String) {
        self.output = output;
        self.status = Status::Failed;
        self.error = Some(ResponseError {
            code: "server_error",
            message,
        });
    }
}

/// The message item's status for a finish: cut short by the token limit, or whole.
pub fn message_status(reason: FinishReason) -> &'static str {
    if reason == FinishReason::Length {
        "incomplete"
    } else {
        "completed"
    }
}

/// The items of a whole answer, in the order the model wrote them: thinking, text, calls. A
/// message is always present unless the model only called tools, as OpenAI answers; when the
/// request forced a custom tool, the text is that tool's input.
pub fn output_items(
    reasoning: String,
    text: String,
    calls: Vec<ToolCall>,
    reason: FinishReason,
    tools: &ResponseTools,
) -> Vec<OutputItem> {
    let mut items = Vec::new();
    if !reasoning.is_empty() {
        items.push(OutputItem::reasoning(item_id("rs"), reasoning));
    }
    if let Some(forced) = &tools.forced {
        items.push(OutputItem::forced_call(item_id("ctc"), forced, text));
    } else if !text.is_empty() || calls.is_empty() {
        items.push(OutputItem::message(
            item_id("msg"),
            text,
            message_status(reason),
        ));
    }
    items.extend(calls.into_iter().map(|call| OutputItem::call(call, tools)));
    items
}

/// The answer as chat messages, appended to the stored conversation: one assistant turn with
/// its text and calls (the thinking is left out, as chat templates drop past thinking).
pub fn assistant_messages(output: &[OutputItem]) -> Vec<Value> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for item in output {
        match item {
            OutputItem::Message { content, .. } => {
                content.iter().for_each(|part| text.push_str(&part.text));
            }
            OutputItem::FunctionCall {
                call_id,
                name,
                namespace,
                arguments,
                ..
            } => calls.push(json!({
                "id": call_id, "type": "function",
                "function": {"name": prompt_name(name, namespace.as_deref()), "arguments": arguments},
            })),
            OutputItem::CustomToolCall {
                call_id,
                name,
                namespace,
                input,
                ..
            } => calls.push(json!({
                "id": call_id, "type": "function",
                "function": {
                    "name": prompt_name(name, namespace.as_deref()),
                    "arguments": custom_arguments(input),
                },
            })),
            OutputItem::Reasoning { .. } => {}
        }
    }
    let mut message = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    vec![message]
}

fn prompt_name(name: &str, namespace: Option<&str>) -> String {
    namespace.map_or_else(|| name.to_owned(), |namespace| flat_name(namespace, name))
}
