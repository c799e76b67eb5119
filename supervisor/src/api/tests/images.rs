//! Images through the three APIs: each accepted form reaches the backend as bytes with its
//! location and a `{"type": "image"}` placeholder where the client put it; each refused form is
//! a 400 in the called API's shape naming the message and part, before the backend is asked.

use corral_ipc::{Prompt, PromptImage};
use serde_json::json;

use super::*;
use crate::api::images::tests::{PNG, PNG_DATA_URL, serve_images};

/// The chat messages and images the backend got.
fn chat_of(backend: &FakeBackend) -> (Value, Vec<PromptImage>) {
    match backend.last_request().1.prompt {
        Prompt::Chat {
            messages, images, ..
        } => (Value::Array(messages), images),
        other => panic!("not a chat prompt: {other:?}"),
    }
}

fn png_at(location: &str) -> PromptImage {
    PromptImage {
        bytes: PNG.to_vec(),
        location: location.to_owned(),
    }
}

fn image_url(url: &str) -> Value {
    json!({"type": "image_url", "image_url": {"url": url, "detail": "high"}})
}

#[tokio::test]
async fn chat_image_url_parts_become_placeholders_and_bytes_in_message_order() {
    let backend = FakeBackend::replying(hello_world());
    let base = serve_images().await;
    let body = json!({"model": "tiny", "messages": [
        {"role": "system", "content": "Look closely."},
        {"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            image_url(PNG_DATA_URL),
        ]},
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": [
            {"type": "image_url", "image_url": format!("{base}/cat.png")},
            {"type": "text", "text": "And this?"},
        ]},
    ]});
    let reply = post(&backend, "/v1/chat/completions", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let (messages, images) = chat_of(&backend);
    assert_eq!(
        messages,
        json!([
            {"role": "system", "content": "Look closely."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"}, {"type": "image"}]},
            {"role": "assistant", "content": "A cat."},
            {"role": "user", "content": [
                {"type": "image"}, {"type": "text", "text": "And this?"}]},
        ])
    );
    assert_eq!(
        images,
        [
            png_at("messages[1].content[1]"),
            png_at("messages[3].content[0]")
        ]
    );
}

#[tokio::test]
async fn a_tool_messages_image_parts_are_kept() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "tiny", "messages": [
        {"role": "user", "content": "Screenshot, please."},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "screenshot", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [image_url(PNG_DATA_URL)]},
    ]});
    let reply = post(&backend, "/v1/chat/completions", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let (messages, images) = chat_of(&backend);
    assert_eq!(messages[2]["content"], json!([{"type": "image"}]));
    assert_eq!(images, [png_at("messages[2].content[0]")]);
}

#[tokio::test]
async fn malformed_chat_images_are_400s_naming_the_part() {
    let backend = FakeBackend::replying(hello_world());
    let base = serve_images().await;
    let cases = [
        (image_url("data:image/png;base64,!!!"), "base64 is invalid"),
        (image_url("data:text/html;base64,aGk="), "not an image type"),
        (image_url("file:///etc/passwd"), "must be a data: URL"),
        (
            json!({"type": "image_url", "image_url": {}}),
            "image_url.url",
        ),
        (image_url(&format!("{base}/page.html")), "is not an image"),
        (image_url(&format!("{base}/missing")), "404"),
        (
            json!({"type": "input_audio", "input_audio": {}}),
            "only `text` and `image_url`",
        ),
    ];
    for (part, problem) in cases {
        let body = json!({"model": "tiny", "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "user", "content": [{"type": "text", "text": "see"}, part]},
        ]});
        let reply = post(&backend, "/v1/chat/completions", body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{problem}");
        let error = reply.error();
        assert_eq!(error["param"], "messages[1].content[1]", "{error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.starts_with("messages[1].content[1]: "), "{message}");
        assert!(message.contains(problem), "{problem}: {message}");
    }
    assert_eq!(backend.request_count(), 0);
}

#[tokio::test]
async fn a_server_that_does_not_fetch_refuses_an_image_url_naming_it() {
    let backend = FakeBackend::replying(hello_world());
    let base = serve_images().await;
    let body = json!({"model": "tiny", "messages": [
        {"role": "user", "content": [image_url(&format!("{base}/cat.png"))]},
    ]});
    let request = post_raw("/v1/chat/completions", "application/json", body.to_string());
    let app = crate::api::router(backend.clone(), 16, image_fetch(false));
    let reply = send(app, request).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let error = reply.error();
    assert_eq!(error["param"], "messages[0].content[0]");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("[images] fetch_urls"),
        "{error}"
    );
    assert_eq!(backend.request_count(), 0);
}

fn anthropic_image(source: Value) -> Value {
    json!({"type": "image", "source": source})
}

fn base64_source(media_type: &str, data: &str) -> Value {
    json!({"type": "base64", "media_type": media_type, "data": data})
}

const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUg==";

#[tokio::test]
async fn anthropic_image_blocks_and_tool_result_images_reach_the_backend() {
    let backend = FakeBackend::replying(hello_world());
    let base = serve_images().await;
    let body = json!({"model": "tiny", "max_tokens": 8, "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "Read cat.png"},
            anthropic_image(json!({"type": "url", "url": format!("{base}/cat.png")})),
        ]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "cat.png"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                anthropic_image(base64_source("image/png", PNG_BASE64))]},
            {"type": "text", "text": "What is it?"},
        ]},
    ]});
    let reply = post(&backend, "/v1/messages", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let (messages, images) = chat_of(&backend);
    assert_eq!(
        messages[0]["content"],
        json!([{"type": "text", "text": "Read cat.png"}, {"type": "image"}])
    );
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "t1", "content": [{"type": "image"}]})
    );
    assert_eq!(
        messages[3],
        json!({"role": "user", "content": "What is it?"})
    );
    assert_eq!(
        images,
        [
            png_at("messages[0].content[1]"),
            png_at("messages[2].content[0].content[0]")
        ]
    );
}

#[tokio::test]
async fn an_error_tool_result_with_an_image_keeps_its_marker_before_it() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "tiny", "max_tokens": 8, "messages": [
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": true, "content": [
                anthropic_image(base64_source("image/png", PNG_BASE64))]},
        ]},
    ]});
    let reply = post(&backend, "/v1/messages", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let (messages, _) = chat_of(&backend);
    assert_eq!(
        messages[0]["content"],
        json!([{"type": "text", "text": "Error: "}, {"type": "image"}])
    );
}

#[tokio::test]
async fn anthropic_count_tokens_carries_the_images() {
    let backend = FakeBackend::replying(vec![done(FinishReason::Stop)]);
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": [
        anthropic_image(base64_source("image/png", PNG_BASE64))]}]});
    let reply = post(&backend, "/v1/messages/count_tokens", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let (_, images) = chat_of(&backend);
    assert_eq!(images, [png_at("messages[0].content[0]")]);
    assert!(backend.last_request().1.count_only);
}

#[tokio::test]
async fn malformed_anthropic_images_are_400s_in_its_shape_naming_the_block() {
    let backend = FakeBackend::replying(hello_world());
    let base = serve_images().await;
    let cases = [
        (
            anthropic_image(base64_source("image/png", "%%%")),
            "messages[0].content[0]: the image's base64 is invalid",
        ),
        (
            anthropic_image(base64_source("application/pdf", "JVBERi0=")),
            "messages[0].content[0]: media type `application/pdf` is not an image type",
        ),
        (
            anthropic_image(json!({"type": "file", "file_id": "file_1"})),
            "messages[0].content[0].source.type: `file` is not supported",
        ),
        (
            anthropic_image(json!({"type": "url", "url": format!("{base}/page.html")})),
            "messages[0].content[0]: ",
        ),
        (
            json!({"type": "tool_result", "tool_use_id": "t", "content": [
                anthropic_image(base64_source("image/png", "%%%"))]}),
            "messages[0].content[0].content[0]: the image's base64 is invalid",
        ),
        (
            json!({"type": "document", "source": base64_source("application/pdf", "JVBERi0=")}),
            "messages[0].content[0]: `document` blocks are not supported",
        ),
    ];
    for (block, expected) in cases {
        let body = json!({"model": "tiny", "max_tokens": 8,
            "messages": [{"role": "user", "content": [block]}]});
        let reply = post(&backend, "/v1/messages", body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{expected}");
        let answer = reply.json();
        assert_eq!(answer["type"], "error", "{answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(expected), "{expected}: {message}");
    }
    let image = anthropic_image(base64_source("image/png", PNG_BASE64));
    let body = json!({"model": "tiny", "max_tokens": 8,
        "messages": [{"role": "assistant", "content": [image]}]});
    let reply = post(&backend, "/v1/messages", body).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(backend.request_count(), 0);
}

#[tokio::test]
async fn responses_input_images_reach_the_backend_named_by_their_place_in_input() {
    let backend = FakeBackend::replying(hello_world());
    let base = serve_images().await;
    let body = json!({"model": "tiny", "instructions": "Be brief.", "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": PNG_DATA_URL, "detail": "auto"},
        ]},
        {"type": "function_call", "call_id": "c1", "name": "screenshot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "the screen:"},
            {"type": "input_image", "image_url": format!("{base}/cat.png")},
        ]},
    ]});
    let reply = post(&backend, "/v1/responses", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let (messages, images) = chat_of(&backend);
    assert_eq!(
        messages[1]["content"],
        json!([{"type": "text", "text": "What is this?"}, {"type": "image"}])
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "c1", "content": [
            {"type": "text", "text": "the screen:"}, {"type": "image"}]})
    );
    assert_eq!(
        images,
        [png_at("input[0].content[1]"), png_at("input[2].output[1]")]
    );
}

#[tokio::test]
async fn malformed_responses_images_are_400s_naming_their_place_in_input() {
    let backend = FakeBackend::replying(hello_world());
    let base = serve_images().await;
    let cases = [
        (
            json!({"type": "input_image", "file_id": "file-1"}),
            "not supported",
        ),
        (
            json!({"type": "input_image", "image_url": "data:image/png;base64,@@"}),
            "base64 is invalid",
        ),
        (
            json!({"type": "input_image", "image_url": format!("{base}/missing")}),
            "404",
        ),
        (
            json!({"type": "input_file", "file_id": "file-1"}),
            "input_file",
        ),
    ];
    for (part, problem) in cases {
        let body = json!({"model": "tiny", "input": [
            {"role": "user", "content": "Hi"},
            {"role": "user", "content": [{"type": "input_text", "text": "see"}, part]},
        ]});
        let reply = post(&backend, "/v1/responses", body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{problem}");
        let error = reply.error();
        assert_eq!(error["param"], "input[1].content[1]", "{error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(problem), "{problem}: {message}");
    }
    assert_eq!(backend.request_count(), 0);
}
