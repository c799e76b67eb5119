//! `POST /v1/completions`: prompt forms, the `text_completion` shape and its logprobs.

use corral_ipc::{FinishReason, Prompt, TokenLogprob};
use serde_json::json;

use super::*;

#[tokio::test]
async fn completion_answers_in_the_text_completion_shape() {
    let backend = FakeBackend::replying(hello_world());
    let reply = post(
        &backend,
        "/v1/completions",
        json!({"model": "tiny", "prompt": "Say"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let json = reply.json();
    assert!(json["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(json["object"], "text_completion");
    assert_eq!(json["model"], "tiny");
    assert_eq!(
        json["choices"],
        json!([{"index": 0, "text": "Hello world", "logprobs": null, "finish_reason": "stop"}])
    );
    assert_eq!(json["usage"]["total_tokens"], 5);
    assert_eq!(
        backend.last_request().1.prompt,
        Prompt::Text("Say".to_owned())
    );
}

#[tokio::test]
async fn every_single_prompt_form_is_accepted() {
    let cases = [
        (json!(["one string"]), Prompt::Text("one string".to_owned())),
        (json!([1, 2, 3]), Prompt::Tokens(vec![1, 2, 3])),
        (json!([[4, 5]]), Prompt::Tokens(vec![4, 5])),
    ];
    for (prompt, expected) in cases {
        let backend = FakeBackend::replying(hello_world());
        let reply = post(
            &backend,
            "/v1/completions",
            json!({"model": "tiny", "prompt": prompt}),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{prompt}");
        assert_eq!(backend.last_request().1.prompt, expected);
    }
}

#[tokio::test]
async fn a_batch_of_prompts_or_bad_token_ids_are_refused() {
    for prompt in [
        json!(["a", "b"]),
        json!([]),
        json!([1, -2]),
        json!(3),
        json!([[1], [2]]),
    ] {
        let backend = FakeBackend::replying(hello_world());
        let reply = post(
            &backend,
            "/v1/completions",
            json!({"model": "tiny", "prompt": prompt}),
        )
        .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{prompt}");
        assert_eq!(reply.error()["param"], "prompt");
        assert_eq!(backend.request_count(), 0);
    }
}

fn token(text: &str, logprob: f32) -> TokenLogprob {
    TokenLogprob {
        token_id: 1,
        token: text.to_owned(),
        logprob,
        top_logprobs: Vec::new(),
    }
}

#[tokio::test]
async fn completion_logprobs_are_parallel_arrays_with_text_offsets() {
    let events = vec![
        StreamEvent::Delta {
            text: "Hé".to_owned(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
            token_count: 2,
            logprobs: Some(vec![token("H", -0.25), token("é", f32::NEG_INFINITY)]),
        },
        StreamEvent::Delta {
            text: "y".to_owned(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
            token_count: 1,
            logprobs: Some(vec![token("y", -1.0)]),
        },
        done(FinishReason::Length),
    ];
    let backend = FakeBackend::replying(events);
    let body = json!({"model": "tiny", "prompt": "x", "logprobs": 0});
    let reply = post(&backend, "/v1/completions", body).await;
    assert_eq!(backend.last_request().1.logprobs, Some(0));
    let json = reply.json();
    assert_eq!(json["choices"][0]["finish_reason"], "length");
    assert_eq!(
        json["choices"][0]["logprobs"],
        json!({
            "tokens": ["H", "é", "y"],
            "token_logprobs": [-0.25, -9999.0, -1.0],
            "top_logprobs": [{}, {}, {}],
            "text_offset": [0, 1, 2],
        })
    );
}

#[tokio::test]
async fn echo_and_too_many_logprobs_are_refused() {
    let backend = FakeBackend::replying(hello_world());
    for (body, param) in [
        (
            json!({"model": "tiny", "prompt": "x", "echo": true}),
            "echo",
        ),
        (
            json!({"model": "tiny", "prompt": "x", "logprobs": 21}),
            "logprobs",
        ),
    ] {
        let reply = post(&backend, "/v1/completions", body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_eq!(reply.error()["param"], param);
    }
}
