//! Streaming: chunk order and shapes, mid-stream failure, and cancellation on disconnect.

use corral_ipc::{FinishReason, TokenLogprob};
use futures_util::StreamExt;
use serde_json::json;

use super::*;

fn chat_stream(include_usage: bool) -> Value {
    json!({
        "model": "tiny", "messages": [{"role": "user", "content": "Hi"}],
        "stream": true, "stream_options": {"include_usage": include_usage},
    })
}

#[tokio::test]
async fn chat_stream_sends_role_deltas_finish_usage_then_done() {
    let backend = FakeBackend::replying(hello_world());
    let reply = post(&backend, "/v1/chat/completions", chat_stream(true)).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers[header::CONTENT_TYPE], "text/event-stream");
    assert_eq!(reply.sse_data().last().unwrap(), "[DONE]");
    let chunks = reply.sse_json();
    assert_eq!(chunks.len(), 5, "{chunks:?}");
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    for chunk in &chunks {
        assert_eq!(chunk["id"], id, "one id for the whole stream");
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "tiny");
    }
    let choice = |index: usize| chunks[index]["choices"][0].clone();
    assert_eq!(
        choice(0)["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(choice(1)["delta"], json!({"content": "Hello"}));
    assert_eq!(choice(2)["delta"], json!({"content": " world"}));
    assert_eq!(choice(2)["finish_reason"], Value::Null);
    assert_eq!(choice(3)["delta"], json!({}));
    assert_eq!(choice(3)["finish_reason"], "stop");
    assert_eq!(chunks[4]["choices"], json!([]));
    assert_eq!(
        chunks[4]["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );
    assert_eq!(backend.cancels(), 0, "a finished stream is not cancelled");
}

#[tokio::test]
async fn chat_stream_without_include_usage_has_no_usage_chunk() {
    let backend = FakeBackend::replying(hello_world());
    let reply = post(&backend, "/v1/chat/completions", chat_stream(false)).await;
    let chunks = reply.sse_json();
    assert_eq!(chunks.len(), 4);
    assert!(chunks.iter().all(|chunk| chunk.get("usage").is_none()));
    assert_eq!(reply.sse_data().last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn completion_stream_sends_text_chunks_finish_usage_then_done() {
    let backend = FakeBackend::replying(vec![delta("Hi"), done(FinishReason::Length)]);
    let body = json!({
        "model": "tiny", "prompt": "x", "stream": true,
        "stream_options": {"include_usage": true},
    });
    let reply = post(&backend, "/v1/completions", body).await;
    let chunks = reply.sse_json();
    assert_eq!(chunks.len(), 3, "{chunks:?}");
    assert!(
        chunks
            .iter()
            .all(|chunk| chunk["object"] == "text_completion")
    );
    assert_eq!(
        chunks[0]["choices"],
        json!([{"index": 0, "text": "Hi", "logprobs": null, "finish_reason": null}])
    );
    assert_eq!(chunks[1]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[2]["choices"], json!([]));
    assert_eq!(chunks[2]["usage"]["total_tokens"], 5);
    assert_eq!(reply.sse_data().last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn a_worker_dying_mid_stream_ends_it_with_an_error_event() {
    let failed = StreamEvent::Failed {
        message: "worker for tiny exited with status 134".to_owned(),
    };
    let backend = FakeBackend::replying(vec![delta("Hel"), failed]);
    let reply = post(&backend, "/v1/chat/completions", chat_stream(true)).await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "the status was sent before the failure"
    );
    let data = reply.sse_data();
    assert!(!data.contains(&"[DONE]".to_owned()), "{data:?}");
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "worker_failed");
    assert_eq!(last["error"]["type"], "server_error");
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("status 134")
    );
    assert_eq!(reply.sse_json()[1]["choices"][0]["delta"]["content"], "Hel");
}

#[tokio::test]
async fn a_stream_closed_without_done_ends_with_an_error_event() {
    let backend = FakeBackend::replying(vec![delta("Hel")]);
    let reply = post(
        &backend,
        "/v1/completions",
        json!({"model": "tiny", "prompt": "x", "stream": true}),
    )
    .await;
    let data = reply.sse_data();
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "worker_failed");
}

#[tokio::test]
async fn a_client_disconnect_cancels_the_generation() {
    let backend = FakeBackend::new(Script::Events {
        events: vec![delta("Hel")],
        hold: true,
    });
    let request = post_raw(
        "/v1/chat/completions",
        "application/json",
        chat_stream(false).to_string(),
    );
    let response = app(&backend).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(std::str::from_utf8(&first).unwrap().contains("assistant"));
    assert_eq!(backend.cancels(), 0, "still streaming");
    drop(body);
    assert_eq!(
        backend.cancels(),
        1,
        "dropping the body fires the cancel guard once"
    );
}

#[tokio::test]
async fn a_client_leaving_before_a_whole_answer_cancels_the_generation() {
    let backend = FakeBackend::new(Script::Events {
        events: vec![delta("Hel")],
        hold: true,
    });
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]});
    let request = post_raw("/v1/chat/completions", "application/json", body.to_string());
    let waited = std::time::Duration::from_millis(50);
    let outcome = tokio::time::timeout(waited, app(&backend).oneshot(request)).await;
    assert!(outcome.is_err(), "the answer is still being generated");
    assert_eq!(
        backend.cancels(),
        1,
        "dropping the handler fires the cancel guard"
    );
}

#[tokio::test]
async fn streamed_chat_chunks_carry_their_logprobs() {
    let token = TokenLogprob {
        token_id: 9,
        token: "Hi".to_owned(),
        logprob: -0.25,
        top_logprobs: Vec::new(),
    };
    let events = vec![
        StreamEvent::Delta {
            text: "Hi".to_owned(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
            token_count: 1,
            logprobs: Some(vec![token]),
        },
        done(FinishReason::Stop),
    ];
    let backend = FakeBackend::replying(events);
    let mut body = chat_stream(false);
    body["logprobs"] = json!(true);
    let chunks = post(&backend, "/v1/chat/completions", body)
        .await
        .sse_json();
    assert_eq!(chunks[0]["choices"][0]["logprobs"], Value::Null);
    assert_eq!(
        chunks[1]["choices"][0]["logprobs"],
        json!({"content": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105], "top_logprobs": []}]})
    );
}
