//! Tools, reasoning and structured outputs: what reaches the worker, and how its calls and
//! thinking come back in OpenAI's shapes.

use corral_ipc::{OutputFormat, Prompt, RejectKind, ToolCall, ToolChoice};
use serde_json::json;

use super::*;

fn weather() -> Value {
    json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})
}

fn user() -> Value {
    json!([{"role": "user", "content": "Weather in Paris?"}])
}

fn call(index: u32, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        index,
        name: name.to_owned(),
        arguments: arguments.to_owned(),
    }
}

fn parts(text: &str, reasoning: &str, tool_calls: Vec<ToolCall>) -> StreamEvent {
    StreamEvent::Delta {
        text: text.to_owned(),
        reasoning: reasoning.to_owned(),
        tool_calls,
        token_count: 1,
        logprobs: None,
    }
}

/// Thinks, says a word, then calls two tools.
fn thinking_then_two_calls() -> Vec<StreamEvent> {
    vec![
        parts("", "The user wants", vec![]),
        parts("", " the weather.", vec![]),
        parts("Checking.", "", vec![]),
        parts("", "", vec![call(0, "get_weather", r#"{"city":"Paris"}"#)]),
        parts("", "", vec![call(1, "get_weather", r#"{"city":"Lyon"}"#)]),
        done(FinishReason::ToolCalls),
    ]
}

#[tokio::test]
async fn tool_choice_parallel_calls_and_template_kwargs_reach_the_worker() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({
        "model": "tiny", "messages": user(), "tools": [weather()],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": false,
        "chat_template_kwargs": {"enable_thinking": true},
        "reasoning_effort": "low",
    });
    let reply = post(&backend, "/v1/chat/completions", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let request = backend.last_request().1;
    assert_eq!(
        request.tool_choice,
        Some(ToolChoice::Function {
            name: "get_weather".to_owned()
        })
    );
    assert_eq!(request.parallel_tool_calls, Some(false));
    let Prompt::Chat {
        template_kwargs, ..
    } = request.prompt
    else {
        panic!("a chat prompt");
    };
    assert_eq!(
        Value::Object(template_kwargs.unwrap()),
        json!({"enable_thinking": true, "reasoning_effort": "low"})
    );
}

#[tokio::test]
async fn reasoning_effort_none_turns_thinking_off_unless_the_client_says_otherwise() {
    assert_eq!(
        kwargs_for_effort("none").await,
        json!({"enable_thinking": false, "reasoning_effort": "none"})
    );
}

/// Gemma 4's template thinks only when `enable_thinking` is set: asking for an effort sets it.
#[tokio::test]
async fn a_reasoning_effort_turns_thinking_on() {
    assert_eq!(
        kwargs_for_effort("high").await,
        json!({"enable_thinking": true, "reasoning_effort": "high"})
    );
}

/// The template variables a chat request with only `reasoning_effort` reaches the worker with.
async fn kwargs_for_effort(effort: &str) -> Value {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "tiny", "messages": user(), "reasoning_effort": effort});
    post(&backend, "/v1/chat/completions", body).await;
    let Prompt::Chat {
        template_kwargs, ..
    } = backend.last_request().1.prompt
    else {
        panic!("a chat prompt");
    };
    Value::Object(template_kwargs.unwrap())
}

#[tokio::test]
async fn response_formats_and_grammars_become_output_formats() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let cases = [
        (json!({"response_format": {"type": "text"}}), None),
        (
            json!({"response_format": {"type": "json_object"}}),
            Some(OutputFormat::JsonObject),
        ),
        (
            json!({"response_format": {"type": "json_schema",
                "json_schema": {"name": "a", "schema": schema, "strict": true}}}),
            Some(OutputFormat::JsonSchema {
                schema: schema.clone(),
                strict: true,
            }),
        ),
        (
            json!({"response_format": {"type": "json_schema",
                "json_schema": {"name": "a", "schema": schema}}}),
            Some(OutputFormat::JsonSchema {
                schema: schema.clone(),
                strict: false,
            }),
        ),
        (
            json!({"grammar": "start: \"yes\" | \"no\""}),
            Some(OutputFormat::Lark {
                grammar: "start: \"yes\" | \"no\"".to_owned(),
            }),
        ),
    ];
    for (extra, expected) in cases {
        for (path, mut body) in [
            (
                "/v1/chat/completions",
                json!({"model": "tiny", "messages": user()}),
            ),
            ("/v1/completions", json!({"model": "tiny", "prompt": "x"})),
        ] {
            let backend = FakeBackend::replying(hello_world());
            for (key, value) in extra.as_object().unwrap() {
                body[key] = value.clone();
            }
            let reply = post(&backend, path, body).await;
            assert_eq!(reply.status, StatusCode::OK, "{extra}: {:?}", reply.body);
            assert_eq!(backend.last_request().1.output_format, expected, "{extra}");
        }
    }
}

#[tokio::test]
async fn calls_and_reasoning_fill_the_message() {
    let backend = FakeBackend::replying(thinking_then_two_calls());
    let body = json!({"model": "tiny", "messages": user(), "tools": [weather()]});
    let reply = post(&backend, "/v1/chat/completions", body).await;
    let choice = &reply.json()["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let message = &choice["message"];
    assert_eq!(message["content"], "Checking.");
    assert_eq!(message["reasoning_content"], "The user wants the weather.");
    let calls = message["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    for (call, city) in calls.iter().zip(["Paris", "Lyon"]) {
        assert!(call["id"].as_str().unwrap().starts_with("call_"), "{call}");
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "get_weather");
        let arguments: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments, json!({"city": city}));
    }
    assert_ne!(calls[0]["id"], calls[1]["id"]);
}

#[tokio::test]
async fn only_calls_means_null_content_and_no_reasoning_field() {
    let events = vec![
        parts("", "", vec![call(0, "get_weather", "{}")]),
        done(FinishReason::ToolCalls),
    ];
    let backend = FakeBackend::replying(events);
    let body = json!({"model": "tiny", "messages": user(), "tools": [weather()]});
    let message =
        post(&backend, "/v1/chat/completions", body).await.json()["choices"][0]["message"].clone();
    assert_eq!(message["content"], Value::Null);
    assert!(message.get("reasoning_content").is_none(), "{message}");
    assert_eq!(message["tool_calls"][0]["function"]["arguments"], "{}");
}

#[tokio::test]
async fn a_stream_sends_reasoning_text_and_each_call_as_opening_then_arguments() {
    let backend = FakeBackend::replying(thinking_then_two_calls());
    let body = json!({"model": "tiny", "messages": user(), "tools": [weather()], "stream": true});
    let chunks = post(&backend, "/v1/chat/completions", body)
        .await
        .sse_json();
    let deltas: Vec<&Value> = chunks
        .iter()
        .map(|chunk| &chunk["choices"][0]["delta"])
        .collect();
    assert_eq!(deltas[0]["role"], "assistant");
    assert_eq!(deltas[1], &json!({"reasoning_content": "The user wants"}));
    assert_eq!(deltas[2], &json!({"reasoning_content": " the weather."}));
    assert_eq!(deltas[3], &json!({"content": "Checking."}));
    for (index, city) in [(0, "Paris"), (1, "Lyon")] {
        let opening = &deltas[4 + 2 * index]["tool_calls"][0];
        assert_eq!(opening["index"], index);
        assert!(opening["id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(opening["type"], "function");
        assert_eq!(opening["function"]["name"], "get_weather");
        assert_eq!(opening["function"]["arguments"], "");
        let arguments = &deltas[5 + 2 * index]["tool_calls"][0];
        assert_eq!(
            arguments,
            &json!({"index": index, "function": {"arguments": format!(r#"{{"city":"{city}"}}"#)}})
        );
    }
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
    assert!(
        deltas.iter().all(|delta| delta
            .get("content")
            .and_then(Value::as_str)
            .is_none_or(|text| !text.contains('<'))),
        "no markup in content"
    );
}

#[tokio::test]
async fn a_worker_refusal_names_the_field_it_refused() {
    let backend = FakeBackend::failing(BackendError::Rejected {
        kind: RejectKind::InvalidRequest,
        message: "llguidance refused the schema: unknown format \"x\"".to_owned(),
        param: Some("response_format.json_schema.schema".to_owned()),
    });
    let body = json!({"model": "tiny", "messages": user(),
        "response_format": {"type": "json_object"}});
    let reply = post(&backend, "/v1/chat/completions", body).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let error = reply.error();
    assert_eq!(error["param"], "response_format.json_schema.schema");
    assert!(error["message"].as_str().unwrap().contains("llguidance"));
}
