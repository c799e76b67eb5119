//! `POST /v1/chat/completions`: response shapes, and what reaches the backend.

use corral_ipc::{FinishReason, Prompt, TokenLogprob, TopLogprob};
use serde_json::json;

use super::*;

#[tokio::test]
async fn chat_answers_in_the_openai_completion_shape() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]});
    let reply = post(&backend, "/v1/chat/completions", body).await;
    assert_eq!(reply.status, StatusCode::OK);
    let json = reply.json();
    assert!(json["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(json["object"], "chat.completion");
    assert!(json["created"].as_u64().unwrap() > 0);
    assert_eq!(json["model"], "tiny");
    assert_eq!(
        json["choices"],
        json!([{
            "index": 0,
            "message": {"role": "assistant", "content": "Hello world"},
            "logprobs": null,
            "finish_reason": "stop",
        }])
    );
    assert_eq!(
        json["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );
    assert_eq!(
        backend.cancels(),
        0,
        "a finished generation is not cancelled"
    );
}

#[tokio::test]
async fn an_alias_is_answered_with_the_canonical_model() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "tiny-alias", "messages": [{"role": "user", "content": "Hi"}]});
    let reply = post(&backend, "/v1/chat/completions", body).await;
    assert_eq!(reply.json()["model"], "tiny");
    assert_eq!(backend.last_request().0, "tiny");
}

#[tokio::test]
async fn length_and_cancelled_map_to_openai_finish_reasons() {
    for (reason, expected) in [
        (FinishReason::Length, "length"),
        (FinishReason::Cancelled, "stop"),
    ] {
        let backend = FakeBackend::replying(vec![delta("x"), done(reason)]);
        let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]});
        let reply = post(&backend, "/v1/chat/completions", body).await;
        assert_eq!(reply.json()["choices"][0]["finish_reason"], expected);
    }
}

#[tokio::test]
async fn sampling_fields_the_client_leaves_out_are_left_for_the_models_defaults() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]});
    post(&backend, "/v1/chat/completions", body).await;
    let request = backend.last_request().1;
    assert_eq!(request.max_tokens, None);
    assert_eq!(request.temperature, None);
    assert_eq!(request.top_p, None);
    assert_eq!(request.top_k, None);
    assert_eq!(request.repetition_penalty, None);
    assert_eq!(request.stop, None);
    assert_eq!(request.tool_choice, None);
    assert_eq!(request.logprobs, None);

    let body = json!({
        "model": "tiny", "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 7, "max_completion_tokens": 9, "temperature": 0.2, "top_p": 0.5,
        "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "seed": 42, "stop": "END",
        "n": 1, "user": "someone", "frequency_penalty": 0.5, "presence_penalty": -1,
        "response_format": {"type": "text"},
    });
    let reply = post(&backend, "/v1/chat/completions", body).await;
    assert_eq!(reply.status, StatusCode::OK);
    let request = backend.last_request().1;
    assert_eq!(
        request.max_tokens,
        Some(9),
        "max_completion_tokens wins over max_tokens"
    );
    assert_eq!(request.temperature, Some(0.2));
    assert_eq!(request.top_p, Some(0.5));
    assert_eq!(request.top_k, Some(40));
    assert_eq!(request.min_p, Some(0.05));
    assert_eq!(request.repetition_penalty, Some(1.1));
    assert_eq!(request.frequency_penalty, Some(0.5));
    assert_eq!(request.presence_penalty, Some(-1.0));
    assert_eq!(request.seed, Some(42));
    assert_eq!(request.stop, Some(vec!["END".to_owned()]));
}

#[tokio::test]
async fn messages_reach_the_template_in_its_shape() {
    let backend = FakeBackend::replying(hello_world());
    let tool = json!({"type": "function", "function": {"name": "weather", "parameters": {}}});
    let body = json!({
        "model": "tiny",
        "tools": [tool],
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
    });
    let reply = post(&backend, "/v1/chat/completions", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let Prompt::Chat {
        messages, tools, ..
    } = backend.last_request().1.prompt
    else {
        panic!("a chat prompt");
    };
    assert_eq!(tools, Some(vec![tool]));
    assert_eq!(
        messages[0],
        json!({"role": "developer", "content": "Be brief."})
    );
    assert_eq!(messages[1]["content"], "a\nb");
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["arguments"],
        json!({"city": "Oslo"})
    );
    assert_eq!(messages[3]["tool_call_id"], "c1");
}

#[tokio::test]
async fn chat_logprobs_come_in_the_openai_shape() {
    let token = TokenLogprob {
        token_id: 5,
        token: "Hi".to_owned(),
        logprob: -0.5,
        top_logprobs: vec![
            TopLogprob {
                token_id: 5,
                token: "Hi".to_owned(),
                logprob: -0.5,
            },
            TopLogprob {
                token_id: 6,
                token: "Yo".to_owned(),
                logprob: f32::NEG_INFINITY,
            },
        ],
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
    let body = json!({
        "model": "tiny", "messages": [{"role": "user", "content": "Hi"}],
        "logprobs": true, "top_logprobs": 2,
    });
    let reply = post(&backend, "/v1/chat/completions", body).await;
    assert_eq!(backend.last_request().1.logprobs, Some(2));
    assert_eq!(
        reply.json()["choices"][0]["logprobs"],
        json!({"content": [{
            "token": "Hi", "logprob": -0.5, "bytes": [72, 105],
            "top_logprobs": [
                {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
                {"token": "Yo", "logprob": -9999.0, "bytes": [89, 111]},
            ],
        }]})
    );
}
