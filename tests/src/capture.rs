//! A capture server on 127.0.0.1 that stands in for an LLM API while an agent CLI runs: it
//! records every request (method, path, headers with credentials redacted, JSON body) and
//! answers the least that API's clients accept (a server-sent event stream when the request
//! streams), so the CLI finishes its turn. The recordings in `tests/data/clients/` come from it.
//!
//! With a `ToolCall`, it answers a tool call instead whenever the request offers that tool and
//! its last turn is the user's, the rule corral's `[models.ID] tool_choice` follows: the CLI runs
//! the tool, sends its result, gets text and ends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::loopback::Loopback;

/// The tool the server calls, with the arguments it passes.
#[derive(Debug, Clone)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Value,
}

#[derive(Default)]
struct Shared {
    tool: Option<ToolCall>,
    requests: Vec<Value>,
}

type Captured = Arc<Mutex<Shared>>;

pub struct CaptureServer {
    server: Loopback,
    state: Captured,
}

impl CaptureServer {
    pub fn start(tool: Option<ToolCall>) -> Self {
        let state = Captured::default();
        state.lock().unwrap().tool = tool;
        let app = Router::new().fallback(capture).with_state(state.clone());
        Self {
            server: Loopback::serve(app),
            state,
        }
    }

    /// `http://127.0.0.1:PORT`, without a path.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.address)
    }

    /// Every request so far, in arrival order: `{"method", "path", "headers", "body"}`.
    pub fn requests(&self) -> Vec<Value> {
        self.state.lock().unwrap().requests.clone()
    }
}

async fn capture(
    State(state): State<Captured>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let tool = {
        let mut shared = state.lock().unwrap();
        shared.requests.push(json!({
            "method": method.as_str(),
            "path": uri.to_string(),
            "headers": recorded_headers(&headers),
            "body": body,
        }));
        shared.tool.clone()
    };
    if method == Method::HEAD || method == Method::GET && uri.path() == "/" {
        // Claude Code checks that the base URL answers before its first request.
        return StatusCode::OK.into_response();
    }
    let call = tool.filter(|tool| calls_for(&body, &tool.name));
    let stream = body["stream"].as_bool() == Some(true);
    let path = uri.path();
    if path.ends_with("/messages") {
        messages_reply(&body, call.as_ref(), stream)
    } else if path.ends_with("/chat/completions") {
        chat_reply(&body, call.as_ref(), stream)
    } else if path.ends_with("/responses") {
        responses_reply(&body, call.as_ref(), stream)
    } else {
        StatusCode::NOT_FOUND.into_response()
    }
}

/// The headers, sorted, without the ones that change on every request or carry credentials.
fn recorded_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "host" | "content-length"))
        .map(|(name, value)| {
            let name = name.as_str();
            let secret = ["auth", "key", "token", "cookie"]
                .iter()
                .any(|word| name.contains(word));
            let value = if secret {
                "<redacted>".to_owned()
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            (name.to_owned(), value)
        })
        .collect()
}

/// Whether the request offers the tool `name` (in any API's shape, namespaces and Codex's
/// `additional_tools` included) and its last turn is the user's rather than a tool result.
fn calls_for(body: &Value, name: &str) -> bool {
    let mut tools: Vec<&Value> = Vec::new();
    collect_tools(&body["tools"], &mut tools);
    for item in body["input"].as_array().into_iter().flatten() {
        if item["type"] == "additional_tools" {
            collect_tools(&item["tools"], &mut tools);
        }
    }
    let offered = tools
        .iter()
        .any(|tool| tool["name"] == name || tool["function"]["name"] == name);
    offered && last_turn_is_users(body)
}

fn collect_tools<'a>(tools: &'a Value, into: &mut Vec<&'a Value>) {
    for tool in tools.as_array().into_iter().flatten() {
        into.push(tool);
        collect_tools(&tool["tools"], into);
    }
}

/// System and developer messages do not count: Claude Code ends its messages with a `system` one.
fn last_turn_is_users(body: &Value) -> bool {
    let last = body["messages"]
        .as_array()
        .or_else(|| body["input"].as_array())
        .and_then(|turns| {
            turns
                .iter()
                .rev()
                .find(|turn| !matches!(turn["role"].as_str(), Some("system" | "developer")))
        });
    let Some(last) = last else {
        // A Responses `input` given as one string is a user turn.
        return body["input"].is_string();
    };
    let is_message = last["type"].is_null() || last["type"] == "message";
    let carries_result = last["content"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|block| block["type"] == "tool_result");
    is_message && last["role"] == "user" && !carries_result
}

fn json_reply(value: Value) -> Response {
    axum::Json(value).into_response()
}

/// `(event name, data)` pairs as one server-sent event stream; a `None` name sends data alone.
fn sse_reply(events: Vec<(Option<&str>, Value)>, done: bool) -> Response {
    let mut text = String::new();
    for (name, data) in events {
        if let Some(name) = name {
            text.push_str(&format!("event: {name}\n"));
        }
        text.push_str(&format!("data: {data}\n\n"));
    }
    if done {
        text.push_str("data: [DONE]\n\n");
    }
    ([(header::CONTENT_TYPE, "text/event-stream")], text).into_response()
}

const ANSWER: &str = "hi";

/// `base` with the keys of `fields` added (both JSON objects).
fn merged(base: &Value, fields: Value) -> Value {
    let mut object = base.clone();
    if let (Some(object), Value::Object(fields)) = (object.as_object_mut(), fields) {
        object.extend(fields);
    }
    object
}

fn messages_reply(body: &Value, call: Option<&ToolCall>, stream: bool) -> Response {
    let (block, stop_reason) = match call {
        Some(call) => (
            json!({"type": "tool_use", "id": "toolu_capture", "name": call.name, "input": call.arguments}),
            "tool_use",
        ),
        None => (json!({"type": "text", "text": ANSWER}), "end_turn"),
    };
    let usage = json!({"input_tokens": 10, "output_tokens": 1});
    let message = |content: Value, stop: Value| {
        json!({"id": "msg_capture", "type": "message", "role": "assistant", "model": body["model"],
               "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage})
    };
    if !stream {
        return json_reply(message(json!([block]), json!(stop_reason)));
    }
    let (start, delta) = match call {
        Some(call) => (
            json!({"type": "tool_use", "id": "toolu_capture", "name": call.name, "input": {}}),
            json!({"type": "input_json_delta", "partial_json": call.arguments.to_string()}),
        ),
        None => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": ANSWER}),
        ),
    };
    sse_reply(
        vec![
            (
                Some("message_start"),
                json!({"type": "message_start", "message": message(json!([]), Value::Null)}),
            ),
            (
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0, "content_block": start}),
            ),
            (
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0, "delta": delta}),
            ),
            (
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                Some("message_delta"),
                json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 1}}),
            ),
            (Some("message_stop"), json!({"type": "message_stop"})),
        ],
        false,
    )
}

fn chat_reply(body: &Value, call: Option<&ToolCall>, stream: bool) -> Response {
    let (message, finish) = match call {
        Some(call) => (
            json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_capture",
                "type": "function", "function": {"name": call.name, "arguments": call.arguments.to_string()}}]}),
            "tool_calls",
        ),
        None => (json!({"role": "assistant", "content": ANSWER}), "stop"),
    };
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11});
    let base = json!({"id": "chatcmpl-capture", "created": 0, "model": body["model"]});
    let with = |fields: Value| merged(&base, fields);
    if !stream {
        return json_reply(with(json!({"object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage})));
    }
    let chunk = |delta: Value, finish: Value| {
        with(json!({"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
    };
    sse_reply(
        vec![
            (
                None,
                chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            ),
            (None, chunk(message, Value::Null)),
            (None, chunk(json!({}), json!(finish))),
            (
                None,
                with(json!({"object": "chat.completion.chunk", "choices": [], "usage": usage})),
            ),
        ],
        true,
    )
}

fn responses_reply(body: &Value, call: Option<&ToolCall>, stream: bool) -> Response {
    let item = match call {
        Some(call) => json!({"id": "fc_capture", "type": "function_call", "status": "completed",
            "call_id": "call_capture", "name": call.name, "arguments": call.arguments.to_string()}),
        None => {
            json!({"id": "msg_capture", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": ANSWER, "annotations": []}]})
        }
    };
    let response = |status: &str, output: Value| {
        json!({"id": "resp_capture", "object": "response", "created_at": 0, "status": status,
            "model": body["model"], "output": output,
            "usage": {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0}}})
    };
    if !stream {
        return json_reply(response("completed", json!([item])));
    }
    let mut events = vec![
        (
            "response.created",
            json!({"response": response("in_progress", json!([]))}),
        ),
        (
            "response.in_progress",
            json!({"response": response("in_progress", json!([]))}),
        ),
    ];
    match call {
        Some(call) => {
            let arguments = call.arguments.to_string();
            let mut added = item.clone();
            added["arguments"] = json!("");
            added["status"] = json!("in_progress");
            events.extend([
                (
                    "response.output_item.added",
                    json!({"output_index": 0, "item": added}),
                ),
                (
                    "response.function_call_arguments.delta",
                    json!({"item_id": "fc_capture", "output_index": 0, "delta": arguments}),
                ),
                (
                    "response.function_call_arguments.done",
                    json!({"item_id": "fc_capture", "output_index": 0, "arguments": arguments}),
                ),
            ]);
        }
        None => {
            let mut added = item.clone();
            added["content"] = json!([]);
            added["status"] = json!("in_progress");
            let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
            let at = json!({"item_id": "msg_capture", "output_index": 0, "content_index": 0});
            let with = |fields: Value| merged(&at, fields);
            events.extend([
                (
                    "response.output_item.added",
                    json!({"output_index": 0, "item": added}),
                ),
                (
                    "response.content_part.added",
                    with(json!({"part": part("")})),
                ),
                ("response.output_text.delta", with(json!({"delta": ANSWER}))),
                ("response.output_text.done", with(json!({"text": ANSWER}))),
                (
                    "response.content_part.done",
                    with(json!({"part": part(ANSWER)})),
                ),
            ]);
        }
    }
    events.extend([
        (
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        ),
        (
            "response.completed",
            json!({"response": response("completed", json!([item]))}),
        ),
    ]);
    let events = events
        .into_iter()
        .enumerate()
        .map(|(sequence, (name, mut data))| {
            data["type"] = json!(name);
            data["sequence_number"] = json!(sequence);
            (Some(name), data)
        })
        .collect();
    sse_reply(events, false)
}
