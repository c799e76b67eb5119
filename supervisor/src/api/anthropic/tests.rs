//! The Messages API over an in-memory backend: the translation into the worker's request, the
//! answer's blocks, the exact event sequence of a stream, and every error in Anthropic's shape.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode, header};
use corral_ipc::{
    FinishReason, GenerateRequest, OutputFormat, Prompt, ToolCall, ToolChoice, Usage,
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower::ServiceExt;

use crate::api::{Backend, BackendError, CancelOnDrop, GenerationStream, ModelCard, StreamEvent};

/// Replays `events` for every request (or fails with `error`), and keeps each request.
struct Fake {
    events: Vec<StreamEvent>,
    error: Option<BackendError>,
    /// Keeps the stream open after the events, as a worker still prefilling does.
    hold: bool,
    requests: Mutex<Vec<GenerateRequest>>,
    senders: Mutex<Vec<mpsc::Sender<StreamEvent>>>,
}

impl Fake {
    fn replying(events: Vec<StreamEvent>) -> Arc<Self> {
        Arc::new(Fake {
            events,
            error: None,
            hold: false,
            requests: Mutex::new(Vec::new()),
            senders: Mutex::new(Vec::new()),
        })
    }

    fn failing(error: BackendError) -> Arc<Self> {
        Arc::new(Fake {
            error: Some(error),
            ..Arc::into_inner(Self::replying(Vec::new())).unwrap()
        })
    }

    fn last_request(&self) -> GenerateRequest {
        self.requests.lock().unwrap().last().cloned().unwrap()
    }
}

impl Backend for Fake {
    fn models(&self) -> Vec<ModelCard> {
        Vec::new()
    }

    fn resolve(&self, name: &str) -> Option<String> {
        (name == "tiny" || name.starts_with("claude-")).then(|| "tiny".to_owned())
    }

    async fn generate(
        &self,
        _model: &str,
        request: GenerateRequest,
    ) -> Result<GenerationStream, BackendError> {
        self.requests.lock().unwrap().push(request);
        if let Some(error) = &self.error {
            return Err(error.clone());
        }
        let (sender, receiver) = mpsc::channel(self.events.len() + 1);
        for event in &self.events {
            sender.try_send(event.clone()).unwrap();
        }
        if self.hold {
            self.senders.lock().unwrap().push(sender);
        }
        Ok(GenerationStream::new(7, receiver, CancelOnDrop::new(|| {})))
    }
}

fn delta(text: &str, reasoning: &str, calls: Vec<ToolCall>) -> StreamEvent {
    StreamEvent::Delta {
        text: text.to_owned(),
        reasoning: reasoning.to_owned(),
        tool_calls: calls,
        token_count: 1,
        logprobs: None,
    }
}

fn done(reason: FinishReason) -> StreamEvent {
    StreamEvent::Done {
        finish_reason: reason,
        stop_sequence: None,
        usage: Usage {
            prompt_tokens: 7,
            completion_tokens: 4,
            cached_tokens: 2,
            ..Usage::default()
        },
    }
}

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        index: 0,
        name: name.to_owned(),
        arguments: arguments.to_owned(),
    }
}

/// Thinks, says something, calls a tool.
fn thinking_text_call() -> Vec<StreamEvent> {
    vec![
        delta("", "Hmm", Vec::new()),
        delta("", ", weather.", Vec::new()),
        delta("Let me", "", Vec::new()),
        delta(" check.", "", Vec::new()),
        delta("", "", vec![call("get_weather", r#"{"city":"Paris"}"#)]),
        done(FinishReason::ToolCalls),
    ]
}

async fn send(backend: &Arc<Fake>, request: Request<Body>) -> (StatusCode, Bytes) {
    let response = crate::api::router(backend.clone(), 4, crate::api::tests::image_fetch(true))
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, body)
}

async fn post(backend: &Arc<Fake>, path: &str, body: Value) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let (status, body) = send(backend, request).await;
    (status, serde_json::from_slice(&body).unwrap())
}

fn ask(extra: Value) -> Value {
    let mut body = json!({
        "model": "tiny", "max_tokens": 32,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
    });
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    body
}

/// The `(event, data)` pairs of an SSE body.
fn events(body: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(body).unwrap();
    text.split("\n\n")
        .filter(|frame| !frame.trim().is_empty())
        .map(|frame| {
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .unwrap()
                    .to_owned()
            };
            let data = serde_json::from_str(&field("data: ")).unwrap();
            (field("event: "), data)
        })
        .collect()
}

fn assert_anthropic_error(status: StatusCode, body: &Value, expected: (u16, &str)) {
    assert_eq!(status.as_u16(), expected.0, "{body}");
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], expected.1, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    assert!(
        body["error"].get("code").is_none(),
        "OpenAI's shape: {body}"
    );
}

#[tokio::test]
async fn a_claude_code_conversation_becomes_the_chat_request_templates_render() {
    let backend = Fake::replying(vec![done(FinishReason::Stop)]);
    let body = json!({
        "model": "claude-sonnet-4-5-20250929", "max_tokens": 100,
        "system": [
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be brief."},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Use the tool.", "signature": "x"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "21C"}]},
                {"type": "text", "text": "And tomorrow?", "cache_control": {"type": "ephemeral"}},
            ]},
            {"role": "system", "content": "Reminder: stay on topic."},
        ],
        "tools": [{"name": "get_weather", "description": "Weather.",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "output_config": {"effort": "low"},
        "stop_sequences": ["a", "b", "c", "d", "e"],
        "metadata": {"user_id": "u"},
        "temperature": 0.0, "top_k": 5,
    });
    let (status, _) = post(&backend, "/v1/messages", body).await;
    assert_eq!(status, StatusCode::OK);
    let request = backend.last_request();
    let Prompt::Chat {
        messages,
        tools,
        template_kwargs,
        ..
    } = request.prompt
    else {
        panic!("a chat prompt");
    };
    assert_eq!(
        Value::Array(messages),
        json!([
            {"role": "system", "content": "You are Claude Code.\nBe brief."},
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Checking.", "reasoning_content": "Use the tool.",
             "tool_calls": [{"id": "toolu_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "21C"},
            {"role": "user", "content": "And tomorrow?"},
            {"role": "system", "content": "Reminder: stay on topic."},
        ])
    );
    assert_eq!(
        tools.unwrap()[0]["function"]["parameters"]["properties"]["city"]["type"],
        "string"
    );
    let kwargs = Value::Object(template_kwargs.unwrap());
    assert_eq!(
        kwargs,
        json!({"enable_thinking": true, "reasoning_effort": "low"})
    );
    assert_eq!(request.tool_choice, Some(ToolChoice::Required));
    assert_eq!(request.parallel_tool_calls, Some(false));
    assert_eq!(request.stop.map(|stop| stop.len()), Some(5));
    assert_eq!(
        (request.max_tokens, request.temperature, request.top_k),
        (Some(100), Some(0.0), Some(5))
    );
}

#[tokio::test]
async fn tool_choice_thinking_and_output_config_map_to_their_worker_settings() {
    let backend = Fake::replying(vec![done(FinishReason::Stop)]);
    let tools = json!([{"name": "f", "input_schema": {"type": "object"}}]);
    let cases = [
        (
            json!({"type": "tool", "name": "f"}),
            ToolChoice::Function { name: "f".into() },
        ),
        (json!({"type": "none"}), ToolChoice::None),
        (json!({"type": "auto"}), ToolChoice::Auto),
    ];
    for (choice, expected) in cases {
        let body = ask(json!({"tools": tools, "tool_choice": choice}));
        assert_eq!(post(&backend, "/v1/messages", body).await.0, StatusCode::OK);
        assert_eq!(backend.last_request().tool_choice, Some(expected));
        assert_eq!(backend.last_request().parallel_tool_calls, None);
    }
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let body = ask(json!({
        "thinking": {"type": "disabled"},
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
    }));
    assert_eq!(post(&backend, "/v1/messages", body).await.0, StatusCode::OK);
    let request = backend.last_request();
    assert_eq!(
        request.output_format,
        Some(OutputFormat::JsonSchema {
            schema,
            strict: true
        })
    );
    let Prompt::Chat {
        template_kwargs, ..
    } = request.prompt
    else {
        panic!("a chat prompt");
    };
    assert_eq!(
        Value::Object(template_kwargs.unwrap()),
        json!({"enable_thinking": false})
    );
    assert_eq!(request.reasoning_budget, None);

    let budgets = [
        (
            json!({"type": "enabled", "budget_tokens": 2048}),
            Some(2048),
        ),
        (json!({"type": "adaptive"}), None),
        (json!({"type": "enabled"}), None),
    ];
    for (thinking, expected) in budgets {
        post(&backend, "/v1/messages", ask(json!({"thinking": thinking}))).await;
        assert_eq!(
            backend.last_request().reasoning_budget,
            expected,
            "{thinking}"
        );
    }
    let bad = ask(json!({"thinking": {"type": "enabled", "budget_tokens": -1}}));
    let (status, body) = post(&backend, "/v1/messages", bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("budget_tokens")
    );
}

#[tokio::test]
async fn the_answer_holds_thinking_text_and_tool_use_blocks_and_anthropic_usage() {
    let backend = Fake::replying(thinking_text_call());
    let (status, body) = post(&backend, "/v1/messages", ask(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(body["model"], "tiny");
    assert!(body["id"].as_str().unwrap().starts_with("msg_"));
    let content = body["content"].as_array().unwrap();
    assert_eq!(
        content[0],
        json!({"type": "thinking", "thinking": "Hmm, weather.", "signature": ""})
    );
    assert_eq!(content[1], json!({"type": "text", "text": "Let me check."}));
    assert_eq!(content[2]["type"], "tool_use");
    assert!(content[2]["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(content[2]["input"], json!({"city": "Paris"}));
    assert_eq!(body["stop_reason"], "tool_use");
    assert_eq!(body["stop_sequence"], Value::Null);
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 5, "output_tokens": 4, "cache_read_input_tokens": 2,
               "cache_creation_input_tokens": 0})
    );
    for (reason, expected) in [
        (FinishReason::Length, "max_tokens"),
        (FinishReason::Stop, "end_turn"),
    ] {
        let backend = Fake::replying(vec![delta("x", "", Vec::new()), done(reason)]);
        let (_, body) = post(&backend, "/v1/messages", ask(json!({}))).await;
        assert_eq!(body["stop_reason"], expected);
    }
    let StreamEvent::Done { usage, .. } = done(FinishReason::Stop) else {
        unreachable!("done() makes a Done");
    };
    let stopped = StreamEvent::Done {
        finish_reason: FinishReason::Stop,
        stop_sequence: Some("END".to_owned()),
        usage,
    };
    for stream in [false, true] {
        let backend = Fake::replying(vec![delta("x", "", Vec::new()), stopped.clone()]);
        let body = ask(json!({"stop_sequences": ["END"], "stream": stream}));
        let request = Request::post("/v1/messages")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = crate::api::router(backend.clone(), 4, crate::api::tests::image_fetch(true))
            .oneshot(request)
            .await
            .unwrap();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let end = if stream {
            let data = text
                .lines()
                .filter_map(|line| line.strip_prefix("data: "))
                .map(|data| serde_json::from_str::<Value>(data).unwrap())
                .find(|data| data["type"] == "message_delta")
                .unwrap();
            data["delta"].clone()
        } else {
            serde_json::from_str(&text).unwrap()
        };
        assert_eq!(end["stop_reason"], "stop_sequence", "{text}");
        assert_eq!(end["stop_sequence"], "END", "{text}");
    }
}

#[tokio::test]
async fn a_stream_follows_anthropics_event_sequence_block_by_block() {
    let backend = Fake::replying(thinking_text_call());
    let request = Request::post("/v1/messages")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(ask(json!({"stream": true})).to_string()))
        .unwrap();
    let (status, body) = send(&backend, request).await;
    assert_eq!(status, StatusCode::OK);
    let events = events(&body);
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    for (name, data) in &events {
        assert_eq!(
            data["type"],
            name.as_str(),
            "the data's type names its event"
        );
    }
    let start = &events[0].1["message"];
    assert_eq!(start["usage"]["input_tokens"], 7);
    assert_eq!(start["content"], json!([]));
    assert_eq!(events[2].1["content_block"]["type"], "thinking");
    assert_eq!(
        events[3].1["delta"],
        json!({"type": "thinking_delta", "thinking": "Hmm"})
    );
    assert_eq!(
        events[7].1["delta"],
        json!({"type": "text_delta", "text": "Let me"})
    );
    assert_eq!(events[7].1["index"], 1);
    let tool = &events[10].1;
    assert_eq!(tool["index"], 2);
    assert_eq!(tool["content_block"]["input"], json!({}));
    assert_eq!(tool["content_block"]["name"], "get_weather");
    assert_eq!(
        events[11].1["delta"],
        json!({"type": "input_json_delta", "partial_json": r#"{"city":"Paris"}"#})
    );
    let message_delta = &events[13].1;
    assert_eq!(message_delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(message_delta["usage"]["output_tokens"], 4);
    assert_eq!(message_delta["usage"]["input_tokens"], 5);
    assert_eq!(message_delta["usage"]["cache_read_input_tokens"], 2);
}

#[tokio::test]
async fn a_worker_dying_mid_stream_ends_it_with_an_error_event() {
    let failed = StreamEvent::Failed {
        message: "the worker exited".to_owned(),
    };
    let backend = Fake::replying(vec![delta("Hi", "", Vec::new()), failed]);
    let request = Request::post("/v1/messages")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(ask(json!({"stream": true})).to_string()))
        .unwrap();
    let (_, body) = send(&backend, request).await;
    let events = events(&body);
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(data["type"], "error");
    assert_eq!(data["error"]["type"], "api_error");
    assert!(!events.iter().any(|(name, _)| name == "message_stop"));
}

#[tokio::test(start_paused = true)]
async fn a_silent_generation_is_kept_alive_with_pings() {
    let backend = Arc::new(Fake {
        hold: true,
        ..Arc::into_inner(Fake::replying(Vec::new())).unwrap()
    });
    let request = Request::post("/v1/messages")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(ask(json!({"stream": true})).to_string()))
        .unwrap();
    let response = crate::api::router(backend.clone(), 4, crate::api::tests::image_fetch(true))
        .oneshot(request)
        .await
        .unwrap();
    let mut body = response.into_body().into_data_stream();
    let mut seen = String::new();
    // message_start and the first ping, then one ping per interval of silence.
    while seen.matches("event: ping").count() < 3 {
        let chunk = tokio::time::timeout(Duration::from_secs(60), body.next())
            .await
            .expect("a ping within the interval")
            .unwrap()
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(seen.starts_with("event: message_start"), "{seen}");
}

#[tokio::test]
async fn count_tokens_answers_the_workers_count_without_generating() {
    let backend = Fake::replying(vec![done(FinishReason::Stop)]);
    let mut body = ask(json!({"system": "Be brief."}));
    body.as_object_mut().unwrap().remove("max_tokens");
    let (status, answer) = post(&backend, "/v1/messages/count_tokens", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer, json!({"input_tokens": 7}));
    assert!(backend.last_request().count_only);
}

#[tokio::test]
async fn bad_requests_get_anthropics_error_shape_and_status() {
    let backend = Fake::replying(vec![done(FinishReason::Stop)]);
    let image = json!({"type": "image", "source": {"type": "base64", "media_type": "text/plain", "data": "AA=="}});
    let mut no_max_tokens = ask(json!({}));
    no_max_tokens.as_object_mut().unwrap().remove("max_tokens");
    let cases = [
        (no_max_tokens, "max_tokens"),
        (
            ask(json!({"messages": [{"role": "user", "content": [image]}]})),
            "messages[0].content[0]: media type `text/plain` is not an image type",
        ),
        (ask(json!({"messages": []})), "messages"),
        (
            ask(json!({"messages": [{"role": "tool", "content": "x"}]})),
            "role",
        ),
        (ask(json!({"tool_choice": {"type": "any"}})), "no tools"),
        (
            ask(json!({"tools": [{"name": "f"}], "tool_choice": {"type": "tool", "name": "g"}})),
            "`g`",
        ),
        (
            ask(json!({"thinking": {"type": "sometimes"}})),
            "thinking.type",
        ),
        (
            ask(json!({"output_config": {"format": {"type": "json_object"}}})),
            "json_schema",
        ),
        (ask(json!({"temperature": 1.5})), "temperature"),
        (ask(json!({"stop_sequences": [""]})), "stop_sequences"),
    ];
    for (body, mentions) in cases {
        let (status, answer) = post(&backend, "/v1/messages", body).await;
        assert_anthropic_error(status, &answer, (400, "invalid_request_error"));
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(mentions), "{mentions}: {message}");
    }
    let (status, answer) = post(&backend, "/v1/messages", ask(json!({"model": "gpt-9"}))).await;
    assert_anthropic_error(status, &answer, (404, "not_found_error"));
}

#[tokio::test]
async fn malformed_bodies_and_wrong_routes_answer_in_anthropics_shape_too() {
    let backend = Fake::replying(vec![done(FinishReason::Stop)]);
    let raw = |method: &str, path: &str, body: Vec<u8>| {
        Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .unwrap()
    };
    let too_large = vec![b' '; crate::api::MAX_BODY_BYTES + 1];
    for (request, expected) in [
        (
            raw("POST", "/v1/messages", b"{not json".to_vec()),
            (400, "invalid_request_error"),
        ),
        (
            raw("POST", "/v1/messages/count_tokens", b"[]".to_vec()),
            (400, "invalid_request_error"),
        ),
        (
            raw("POST", "/v1/messages", too_large),
            (413, "request_too_large"),
        ),
        (
            raw("GET", "/v1/messages", Vec::new()),
            (405, "invalid_request_error"),
        ),
        (
            raw("POST", "/v1/messages/batches", Vec::new()),
            (404, "not_found_error"),
        ),
    ] {
        let (status, body) = send(&backend, request).await;
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_anthropic_error(status, &body, expected);
    }
}

#[tokio::test]
async fn backend_failures_map_to_anthropics_statuses() {
    let cases = [
        (
            BackendError::Unavailable {
                message: "crash loop".into(),
                retry_after_secs: 3,
            },
            (529, "overloaded_error"),
        ),
        (
            BackendError::InsufficientMemory {
                message: "full".into(),
            },
            (507, "api_error"),
        ),
        (
            BackendError::WorkerFailed {
                message: "died".into(),
            },
            (502, "api_error"),
        ),
        (
            BackendError::Internal {
                message: "bug".into(),
            },
            (500, "api_error"),
        ),
        (
            BackendError::UnknownModel {
                model: "tiny".into(),
            },
            (404, "not_found_error"),
        ),
        (
            BackendError::Rejected {
                kind: corral_ipc::RejectKind::PromptTooLong,
                message: "prompt is too long".into(),
                param: None,
            },
            (400, "invalid_request_error"),
        ),
        (
            BackendError::ContextOverflow(corral_ipc::ContextOverflow {
                prompt_tokens: 20322,
                context_tokens: 8192,
            }),
            (400, "invalid_request_error"),
        ),
    ];
    for (error, expected) in cases {
        let backend = Fake::failing(error);
        for stream in [false, true] {
            let (status, body) =
                post(&backend, "/v1/messages", ask(json!({"stream": stream}))).await;
            assert_anthropic_error(status, &body, expected);
        }
    }
}

/// Claude Code reads this exact wording as "the conversation must be compacted".
#[tokio::test]
async fn a_prompt_too_long_reads_as_anthropics_own_message() {
    let backend = Fake::failing(BackendError::ContextOverflow(corral_ipc::ContextOverflow {
        prompt_tokens: 20322,
        context_tokens: 8192,
    }));
    for stream in [false, true] {
        let (status, body) = post(&backend, "/v1/messages", ask(json!({"stream": stream}))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(
            body["error"]["message"],
            "prompt is too long: 20322 tokens > 8192 maximum"
        );
    }
}

/// Anthropic's typed tools run on Anthropic's side: left out of the prompt, named in a header.
#[tokio::test]
async fn server_tools_are_left_out_and_named_in_a_header() {
    let backend = Fake::replying(vec![delta("Hi", "", Vec::new()), done(FinishReason::Stop)]);
    let body = ask(json!({"tools": [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        {"name": "get_weather", "input_schema": {"type": "object"}},
        {"type": "code_execution_20250825", "name": "code_execution"},
    ]}));
    let response = crate::api::router(backend.clone(), 4, crate::api::tests::image_fetch(true))
        .oneshot(
            Request::post("/v1/messages")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body.to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[crate::api::hosted_tools::HEADER],
        "code_execution_20250825, web_search_20250305"
    );
    let Prompt::Chat { tools, .. } = backend.last_request().prompt else {
        panic!("a chat prompt");
    };
    let tools = tools.unwrap();
    let names: Vec<&str> = tools
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["get_weather"]);
}
