//! Every failure answers with the OpenAI error body and the status its cause maps to.

use corral_ipc::{ContextOverflow, RejectKind};
use serde_json::json;

use super::*;

fn chat_body() -> Value {
    json!({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]})
}

async fn post_chat_raw(content_type: &str, body: impl Into<Body>) -> Reply {
    let backend = FakeBackend::replying(hello_world());
    let reply = send(
        app(&backend),
        post_raw("/v1/chat/completions", content_type, body),
    )
    .await;
    assert_eq!(
        backend.request_count(),
        0,
        "a bad body never reaches the backend"
    );
    reply
}

#[tokio::test]
async fn malformed_json_is_a_400_in_openai_shape() {
    let reply = post_chat_raw("application/json", "{\"model\": ").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error()["type"], "invalid_request_error");
}

#[tokio::test]
async fn a_wrong_field_type_is_a_400_naming_the_problem() {
    let body = json!({"model": "tiny", "messages": "Hi"}).to_string();
    let reply = post_chat_raw("application/json", body).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let message = reply.error()["message"].as_str().unwrap().to_owned();
    assert!(message.contains("invalid type"), "{message}");
}

#[tokio::test]
async fn a_non_json_content_type_is_a_400() {
    let reply = post_chat_raw("text/plain", chat_body().to_string()).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    reply.error();
}

#[tokio::test]
async fn invalid_utf8_is_a_400() {
    let body =
        b"{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}";
    let reply = post_chat_raw("application/json", body.to_vec()).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    reply.error();
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_413_in_openai_shape() {
    let padding = "x".repeat(crate::api::MAX_BODY_BYTES + 1);
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": padding}]});
    let reply = post_chat_raw("application/json", body.to_string()).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    reply.error();
}

/// Each body is valid JSON that asks for something invalid; the error names the parameter.
#[tokio::test]
async fn invalid_parameters_are_400s_naming_the_parameter() {
    let user = json!([{"role": "user", "content": "Hi"}]);
    let cases = [
        (json!({"model": "tiny", "messages": []}), "messages"),
        (
            json!({"model": "tiny", "messages": [{"content": "Hi"}]}),
            "messages",
        ),
        (
            json!({"model": "tiny", "messages": [{"role": "wizard", "content": "Hi"}]}),
            "messages",
        ),
        (
            json!({"model": "tiny", "messages": [{"role": "user"}]}),
            "messages",
        ),
        (
            json!({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            "messages[0].content[0]",
        ),
        (json!({"model": "tiny", "messages": user, "n": 2}), "n"),
        (
            json!({"model": "tiny", "messages": user, "max_tokens": 0}),
            "max_tokens",
        ),
        (
            json!({"model": "tiny", "messages": user, "temperature": 2.5}),
            "temperature",
        ),
        (
            json!({"model": "tiny", "messages": user, "top_p": 1.5}),
            "top_p",
        ),
        (
            json!({"model": "tiny", "messages": user, "stop": ["a", "b", "c", "d", "e"]}),
            "stop",
        ),
        (
            json!({"model": "tiny", "messages": user, "top_logprobs": 2}),
            "top_logprobs",
        ),
        (
            json!({"model": "tiny", "messages": user, "logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
        ),
        (
            json!({"model": "tiny", "messages": user, "response_format": {"type": "xml"}}),
            "response_format.type",
        ),
        (
            json!({"model": "tiny", "messages": user, "response_format": {"type": "json_schema",
                "json_schema": {"name": "x", "schema": [1]}}}),
            "response_format.json_schema.schema",
        ),
        (
            json!({"model": "tiny", "messages": user, "response_format": {"type": "json_schema"}}),
            "response_format.json_schema",
        ),
        (
            json!({"model": "tiny", "messages": user, "response_format": {"type": "json_object"},
                "grammar": "start: \"a\""}),
            "grammar",
        ),
        (
            json!({"model": "tiny", "messages": user, "tools": [weather(), {"type": "function",
                "function": {"description": "no name"}}]}),
            "tools[1].function.name",
        ),
        (
            json!({"model": "tiny", "messages": user, "tools": [{"type": "function",
                "function": {"name": "a b"}}]}),
            "tools[0].function.name",
        ),
        (
            json!({"model": "tiny", "messages": user, "tools": [{"type": "retrieval"}]}),
            "tools[0].type",
        ),
        (
            json!({"model": "tiny", "messages": user, "tools": [{"type": "function",
                "function": {"name": "f", "parameters": "object"}}]}),
            "tools[0].function.parameters",
        ),
        (
            json!({"model": "tiny", "messages": user, "tools": [weather()],
                "tool_choice": {"type": "function", "function": {"name": "get_time"}}}),
            "tool_choice",
        ),
        (
            json!({"model": "tiny", "messages": user, "tools": [weather()], "tool_choice": "always"}),
            "tool_choice",
        ),
        (
            json!({"model": "tiny", "messages": user, "tool_choice": "required"}),
            "tool_choice",
        ),
        (
            json!({"model": "tiny", "messages": user, "reasoning_effort": "extreme"}),
            "reasoning_effort",
        ),
    ];
    for (body, param) in cases {
        let reply = post_chat_raw("application/json", body.to_string()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(reply.error()["param"], param, "{body}");
    }
}

fn weather() -> Value {
    json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})
}

#[tokio::test]
async fn n_above_one_says_what_is_unsupported() {
    let mut body = chat_body();
    body["n"] = json!(2);
    let reply = post_chat_raw("application/json", body.to_string()).await;
    assert!(
        reply.error()["message"]
            .as_str()
            .unwrap()
            .contains("only n=1")
    );
}

#[tokio::test]
async fn an_unknown_model_is_a_404_model_not_found() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "huge", "messages": [{"role": "user", "content": "Hi"}]});
    let reply = post(&backend, "/v1/chat/completions", body).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    let error = reply.error();
    assert_eq!(error["code"], "model_not_found");
    assert_eq!(error["type"], "not_found_error");
    assert!(error["message"].as_str().unwrap().contains("huge"));
    assert_eq!(
        get(&backend, "/v1/models/huge").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_openai_shape() {
    let backend = FakeBackend::replying(hello_world());
    let reply = get(&backend, "/v1/engines").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert!(
        reply.error()["message"]
            .as_str()
            .unwrap()
            .contains("/v1/engines")
    );
    let reply = get(&backend, "/v1/chat/completions").await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    reply.error();
}

#[tokio::test]
async fn backend_errors_map_to_their_statuses() {
    let rejected = |kind| BackendError::Rejected {
        kind,
        message: "no".to_owned(),
        param: None,
    };
    let cases = [
        (rejected(RejectKind::PromptTooLong), StatusCode::BAD_REQUEST),
        (
            rejected(RejectKind::PrefillMemory),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            rejected(RejectKind::InvalidRequest),
            StatusCode::BAD_REQUEST,
        ),
        (
            rejected(RejectKind::Overloaded),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            rejected(RejectKind::ShuttingDown),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            BackendError::UnknownModel {
                model: "tiny".to_owned(),
            },
            StatusCode::NOT_FOUND,
        ),
        (
            BackendError::Unservable {
                model: "llava:7b".to_owned(),
                reason: "a vision model".to_owned(),
            },
            StatusCode::BAD_REQUEST,
        ),
        (
            BackendError::InsufficientMemory {
                message: "needs 9 GB".to_owned(),
            },
            StatusCode::INSUFFICIENT_STORAGE,
        ),
        (
            BackendError::WorkerFailed {
                message: "killed".to_owned(),
            },
            StatusCode::BAD_GATEWAY,
        ),
        (
            BackendError::Internal {
                message: "bug".to_owned(),
            },
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
    ];
    for (error, status) in cases {
        let backend = FakeBackend::failing(error.clone());
        let reply = post(&backend, "/v1/chat/completions", chat_body()).await;
        assert_eq!(reply.status, status, "{error:?}");
        reply.error();
    }
}

/// OpenAI's 400 with `code: context_length_exceeded` and its wording, which clients match on.
#[tokio::test]
async fn a_prompt_too_long_is_a_400_context_length_exceeded_with_the_numbers() {
    let error = BackendError::ContextOverflow(ContextOverflow {
        prompt_tokens: 20322,
        context_tokens: 8192,
    });
    let backend = FakeBackend::failing(error);
    let responses_body = json!({"model": "tiny", "input": "hi"});
    for (path, body) in [
        ("/v1/chat/completions", chat_body()),
        ("/v1/responses", responses_body),
    ] {
        let reply = post(&backend, path, body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{path}");
        let error = reply.error();
        assert_eq!(error["code"], "context_length_exceeded");
        assert_eq!(error["type"], "invalid_request_error");
        assert_eq!(
            error["message"],
            "This model's maximum context length is 8192 tokens. However, your messages \
             resulted in 20322 tokens. Please reduce the length of the messages."
        );
    }
}

#[tokio::test]
async fn an_unservable_model_is_a_400_naming_the_reason() {
    let error = BackendError::Unservable {
        model: "llava:7b".to_owned(),
        reason: "a vision model (its manifest has a projector layer)".to_owned(),
    };
    let reply = post(
        &FakeBackend::failing(error),
        "/v1/chat/completions",
        chat_body(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let error = reply.error();
    assert_eq!(error["code"], "model_not_servable");
    assert_eq!(error["param"], "model");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("llava:7b") && message.contains("projector"),
        "{message}"
    );
}

#[tokio::test]
async fn an_unavailable_model_is_a_503_with_retry_after() {
    let error = BackendError::Unavailable {
        message: "tiny is restarting after a crash".to_owned(),
        retry_after_secs: 7,
    };
    let reply = post(
        &FakeBackend::failing(error),
        "/v1/chat/completions",
        chat_body(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.headers[header::RETRY_AFTER], "7");
    assert_eq!(reply.error()["code"], "model_unavailable");
}

#[tokio::test]
async fn a_worker_dying_mid_request_is_a_502() {
    let failed = StreamEvent::Failed {
        message: "worker for tiny killed by signal 9".to_owned(),
    };
    for events in [vec![delta("Hel"), failed.clone()], vec![failed], vec![]] {
        let backend = FakeBackend::replying(events);
        let reply = post(&backend, "/v1/chat/completions", chat_body()).await;
        assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
        assert_eq!(reply.error()["code"], "worker_failed");
    }
}
