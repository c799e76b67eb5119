//! The Responses API's streamed events: their order, their shapes as the OpenAI SDK parses
//! them, the final object agreeing with them, and the end of a stream whose worker failed.

use corral_ipc::ToolCall;
use serde_json::json;

use super::*;

fn stream(backend: &Arc<FakeBackend>) -> impl Future<Output = Reply> {
    post(
        backend,
        "/v1/responses",
        json!({"model": "tiny", "input": "Hi", "stream": true}),
    )
}

/// Each event's `event:` name, checked against its payload's `type`, and the payloads.
fn events(reply: &Reply) -> Vec<Value> {
    let text = std::str::from_utf8(&reply.body).unwrap();
    let mut names = text.lines().filter_map(|line| line.strip_prefix("event: "));
    let payloads: Vec<Value> = reply
        .sse_data()
        .iter()
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    for (index, payload) in payloads.iter().enumerate() {
        assert_eq!(Some(payload["type"].as_str().unwrap()), names.next());
        assert_eq!(payload["sequence_number"], index, "{payload}");
    }
    payloads
}

fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|event| event["type"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_text_stream_opens_writes_and_closes_one_message() {
    let backend = FakeBackend::replying(hello_world());
    let reply = stream(&backend).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers[header::CONTENT_TYPE], "text/event-stream");
    let events = events(&reply);
    assert_eq!(
        types(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let id = events[0]["response"]["id"].as_str().unwrap();
    assert_eq!(events[0]["response"]["status"], "in_progress");
    assert_eq!(events[0]["response"]["output"], json!([]));
    let item_id = events[2]["item"]["id"].as_str().unwrap();
    assert_eq!(events[4]["delta"], "Hello");
    assert_eq!(events[4]["item_id"], item_id);
    assert_eq!(events[6]["text"], "Hello world");
    let done = &events[9]["response"];
    assert_eq!(done["id"], id);
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"], json!([events[8]["item"]]));
    assert_eq!(done["output"][0]["content"][0]["text"], "Hello world");
    assert_eq!(done["usage"]["total_tokens"], 5);
    assert_eq!(backend.cancels(), 0);
}

#[tokio::test]
async fn a_stream_gives_reasoning_text_and_calls_their_own_items_in_order() {
    let call = |index: u32, city: &str| ToolCall {
        index,
        name: "get_weather".to_owned(),
        arguments: format!(r#"{{"city":"{city}"}}"#),
    };
    let delta = |text: &str, reasoning: &str, calls: Vec<ToolCall>| StreamEvent::Delta {
        text: text.to_owned(),
        reasoning: reasoning.to_owned(),
        tool_calls: calls,
        token_count: 1,
        logprobs: None,
    };
    let backend = FakeBackend::replying(vec![
        delta("", "Think", vec![]),
        delta("", "ing.", vec![]),
        delta("Checking.", "", vec![call(0, "Paris")]),
        delta("", "", vec![call(1, "Lyon")]),
        done(FinishReason::ToolCalls),
    ]);
    let events = events(&stream(&backend).await);
    assert_eq!(
        types(&events)[2..],
        [
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(events[8]["item"]["content"][0]["text"], "Thinking.");
    let call_added = &events[15];
    assert_eq!(call_added["output_index"], 2);
    assert_eq!(call_added["item"]["arguments"], "");
    assert_eq!(events[16]["delta"], r#"{"city":"Paris"}"#);
    let output = events.last().unwrap()["response"]["output"].clone();
    let kinds: Vec<&str> = output
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["reasoning", "message", "function_call", "function_call"]
    );
    assert_eq!(output[3]["arguments"], r#"{"city":"Lyon"}"#);
    assert_eq!(output[2]["id"], events[18]["item"]["id"]);
}

#[tokio::test]
async fn a_stream_cut_by_the_token_limit_ends_incomplete() {
    let backend = FakeBackend::replying(vec![delta("Hel"), done(FinishReason::Length)]);
    let events = events(&stream(&backend).await);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.incomplete");
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
}

#[tokio::test]
async fn a_worker_failing_mid_stream_ends_with_response_failed() {
    let failed = StreamEvent::Failed {
        message: "worker exited".to_owned(),
    };
    let backend = FakeBackend::replying(vec![delta("Hel"), failed]);
    let events = events(&stream(&backend).await);
    let types = types(&events);
    assert_eq!(types.last(), Some(&"response.failed"));
    assert!(types.contains(&"response.output_item.done"), "{types:?}");
    let response = &events.last().unwrap()["response"];
    assert_eq!(response["status"], "failed");
    assert_eq!(response["error"]["code"], "server_error");
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("worker exited")
    );
}

#[tokio::test]
async fn a_streamed_response_is_stored_once_it_completes() {
    let backend = FakeBackend::replying(hello_world());
    let app = app(&backend);
    let body = json!({"model": "tiny", "input": "Hi", "stream": true});
    let request = post_raw("/v1/responses", "application/json", body.to_string());
    let events = events(&send(app.clone(), request).await);
    let completed = events.last().unwrap()["response"].clone();
    let path = format!("/v1/responses/{}", completed["id"].as_str().unwrap());
    let got = send(app, Request::get(path).body(Body::empty()).unwrap()).await;
    assert_eq!(got.json(), completed);
}
