//! The Responses API over the fake backend: what its requests become for the worker, the
//! response object, and the store behind `previous_response_id`, `GET` and `DELETE`.

use corral_ipc::{OutputFormat, Prompt, ToolChoice};
use serde_json::json;

use super::*;

fn weather() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "Weather by city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": true})
}

fn chat_prompt(request: &GenerateRequest) -> (Vec<Value>, Option<Vec<Value>>, Option<Value>) {
    match &request.prompt {
        Prompt::Chat {
            messages,
            tools,
            template_kwargs,
            ..
        } => (
            messages.clone(),
            tools.clone(),
            template_kwargs.clone().map(Value::Object),
        ),
        other => panic!("not a chat prompt: {other:?}"),
    }
}

/// One app, so every request sees the same store.
async fn call(app: &Router, method: &str, path: &str, body: Option<Value>) -> Reply {
    let builder = Request::builder().method(method).uri(path);
    let request = match body {
        Some(body) => builder
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string())),
        None => builder.body(Body::empty()),
    };
    send(app.clone(), request.unwrap()).await
}

#[tokio::test]
async fn text_input_with_instructions_answers_one_message_and_usage() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "tiny-alias", "input": "Hi", "instructions": "Be brief.",
        "max_output_tokens": 7, "temperature": 0.5, "metadata": {"k": "v"}});
    let reply = post(&backend, "/v1/responses", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let response = reply.json();
    assert!(response["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(response["object"], "response");
    assert_eq!(response["status"], "completed");
    assert_eq!(response["model"], "tiny");
    assert_eq!(response["metadata"], json!({"k": "v"}));
    let output = response["output"].as_array().unwrap();
    assert_eq!(output.len(), 1, "{response}");
    assert_eq!(output[0]["type"], "message");
    assert!(output[0]["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(output[0]["role"], "assistant");
    assert_eq!(
        output[0]["content"],
        json!([{"type": "output_text", "text": "Hello world", "annotations": []}])
    );
    assert_eq!(response["usage"]["input_tokens"], 3);
    assert_eq!(response["usage"]["output_tokens"], 2);
    assert_eq!(response["usage"]["total_tokens"], 5);
    assert_eq!(
        response["usage"]["input_tokens_details"]["cached_tokens"],
        0
    );
    let request = backend.last_request().1;
    assert_eq!(request.max_tokens, Some(7));
    assert_eq!(request.temperature, Some(0.5));
    let (messages, tools, _) = chat_prompt(&request);
    assert_eq!(
        messages,
        vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "Hi"}),
        ]
    );
    assert_eq!(tools, None);
}

#[tokio::test]
async fn flat_function_tools_choice_format_and_effort_reach_the_worker_in_chat_shape() {
    let backend = FakeBackend::replying(hello_world());
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let body = json!({
        "model": "tiny",
        "input": [{"role": "developer", "content": [{"type": "input_text", "text": "Rules"}]},
                  {"type": "message", "role": "user", "content": "Weather?"}],
        "tools": [weather()],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "parallel_tool_calls": false,
        "text": {"format": {"type": "json_schema", "name": "a", "schema": schema, "strict": true}},
        "reasoning": {"effort": "none"},
    });
    let reply = post(&backend, "/v1/responses", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let request = backend.last_request().1;
    let (messages, tools, kwargs) = chat_prompt(&request);
    assert_eq!(
        messages[0],
        json!({"role": "developer", "content": "Rules"})
    );
    assert_eq!(
        tools.unwrap()[0],
        json!({"type": "function", "function": {"name": "get_weather",
            "description": "Weather by city", "parameters": weather()["parameters"],
            "strict": true}})
    );
    assert_eq!(
        request.tool_choice,
        Some(ToolChoice::Function {
            name: "get_weather".to_owned()
        })
    );
    assert_eq!(request.parallel_tool_calls, Some(false));
    assert_eq!(
        request.output_format,
        Some(OutputFormat::JsonSchema {
            schema,
            strict: true
        })
    );
    assert_eq!(
        kwargs,
        Some(json!({"enable_thinking": false, "reasoning_effort": "none"}))
    );
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_field_before_the_backend() {
    let backend = FakeBackend::replying(hello_world());
    let cases = [
        (
            json!({"input": "x", "tools": [{"type": "teleport"}]}),
            "tools[0].type",
        ),
        (
            json!({"input": [{"role": "robot", "content": "x"}]}),
            "input[0].role",
        ),
        (json!({"input": [{"type": "hologram"}]}), "input[0].type"),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
            "input[0].content[0]",
        ),
        (
            json!({"input": "x", "tool_choice": "required"}),
            "tool_choice",
        ),
        (json!({"input": "x", "temperature": 9}), "temperature"),
        (json!({}), "input"),
    ];
    for (mut body, param) in cases {
        body["model"] = json!("tiny");
        let reply = post(&backend, "/v1/responses", body.clone()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(reply.error()["param"], param, "{body}");
    }
    assert_eq!(backend.request_count(), 0);
}

#[tokio::test]
async fn a_call_then_its_output_continue_the_stored_conversation() {
    let backend = FakeBackend::replying(called("get_weather", r#"{"city":"Paris"}"#));
    let app = app(&backend);
    let first = json!({"model": "tiny", "input": "Weather in Paris?", "tools": [weather()],
        "instructions": "Only for the first turn."});
    let first = call(&app, "POST", "/v1/responses", Some(first))
        .await
        .json();
    let output = first["output"].as_array().unwrap();
    assert_eq!(output.len(), 1, "only the call, no message: {first}");
    assert_eq!(output[0]["type"], "function_call");
    assert!(output[0]["id"].as_str().unwrap().starts_with("fc_"));
    assert_eq!(output[0]["name"], "get_weather");
    assert_eq!(output[0]["arguments"], r#"{"city":"Paris"}"#);
    let call_id = output[0]["call_id"].as_str().unwrap();
    assert!(call_id.starts_with("call_"));

    let second = json!({"model": "tiny", "previous_response_id": first["id"],
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "Sunny"}]});
    let reply = call(&app, "POST", "/v1/responses", Some(second)).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(reply.json()["previous_response_id"], first["id"]);
    let (messages, _, _) = chat_prompt(&backend.last_request().1);
    assert_eq!(
        messages,
        vec![
            json!({"role": "user", "content": "Weather in Paris?"}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": call_id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}),
            json!({"role": "tool", "tool_call_id": call_id, "content": "Sunny"}),
        ],
        "the previous turn without its instructions, then the call's output"
    );
}

#[tokio::test]
async fn input_function_calls_join_the_assistant_turn_before_them() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "tiny", "input": [
        {"role": "user", "content": "Two cities?"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2",
         "output": [{"type": "input_text", "text": "two"}]},
    ]});
    let reply = post(&backend, "/v1/responses", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let (messages, _, _) = chat_prompt(&backend.last_request().1);
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert_eq!(messages[1]["content"], "Checking.");
    assert_eq!(messages[1]["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(messages[3]["content"], "two");
}

#[tokio::test]
async fn the_token_limit_makes_an_incomplete_response() {
    let backend = FakeBackend::replying(vec![delta("Hel"), done(FinishReason::Length)]);
    let reply = post(
        &backend,
        "/v1/responses",
        json!({"model": "tiny", "input": "x"}),
    )
    .await;
    let response = reply.json();
    assert_eq!(response["status"], "incomplete");
    assert_eq!(
        response["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(response["output"][0]["status"], "incomplete");
}

#[tokio::test]
async fn retrieve_and_delete_a_stored_response_then_it_is_gone() {
    let backend = FakeBackend::replying(hello_world());
    let app = app(&backend);
    let created = json!({"model": "tiny", "input": "Hi"});
    let created = call(&app, "POST", "/v1/responses", Some(created))
        .await
        .json();
    let path = format!("/v1/responses/{}", created["id"].as_str().unwrap());
    let got = call(&app, "GET", &path, None).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json(), created);
    let deleted = call(&app, "DELETE", &path, None).await;
    assert_eq!(
        deleted.json(),
        json!({"id": created["id"], "object": "response", "deleted": true})
    );
    for method in ["GET", "DELETE"] {
        let gone = call(&app, method, &path, None).await;
        assert_eq!(gone.status, StatusCode::NOT_FOUND, "{method}");
        let message = gone.error()["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains(created["id"].as_str().unwrap()),
            "{message}"
        );
    }
}

#[tokio::test]
async fn unstored_and_unknown_ids_are_404s_naming_them() {
    let backend = FakeBackend::replying(hello_world());
    let app = app(&backend);
    let body = json!({"model": "tiny", "input": "Hi", "store": false});
    let created = call(&app, "POST", "/v1/responses", Some(body)).await.json();
    assert_eq!(created["store"], false);
    let path = format!("/v1/responses/{}", created["id"].as_str().unwrap());
    assert_eq!(
        call(&app, "GET", &path, None).await.status,
        StatusCode::NOT_FOUND
    );
    let body = json!({"model": "tiny", "input": "Hi", "previous_response_id": "resp_nope"});
    let reply = call(&app, "POST", "/v1/responses", Some(body)).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    let error = reply.error();
    assert_eq!(error["param"], "previous_response_id");
    assert_eq!(error["code"], "previous_response_not_found");
    assert!(error["message"].as_str().unwrap().contains("resp_nope"));
    assert_eq!(
        backend.request_count(),
        1,
        "the unknown id never reached the backend"
    );
}

#[tokio::test]
async fn the_store_evicts_its_oldest_response_first() {
    let backend = FakeBackend::replying(hello_world());
    let app = crate::api::router(backend.clone(), 2, super::image_fetch(true));
    let mut ids = Vec::new();
    for _ in 0..3 {
        let body = json!({"model": "tiny", "input": "Hi"});
        let created = call(&app, "POST", "/v1/responses", Some(body)).await.json();
        ids.push(created["id"].as_str().unwrap().to_owned());
    }
    let status = async |id: &str| {
        let path = format!("/v1/responses/{id}");
        call(&app, "GET", &path, None).await.status
    };
    assert_eq!(status(&ids[0]).await, StatusCode::NOT_FOUND, "evicted");
    assert_eq!(status(&ids[1]).await, StatusCode::OK);
    assert_eq!(status(&ids[2]).await, StatusCode::OK);
    let body = json!({"model": "tiny", "input": "Hi", "previous_response_id": ids[0]});
    let reply = call(&app, "POST", "/v1/responses", Some(body)).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
}
