//! Images through all three APIs to the real `corral` and a text-only model's worker: a data URL
//! and an image fetched from a server on 127.0.0.1 reach the worker, whose refusal names each
//! image where the client put it (so the bytes and their location crossed the IPC); malformed
//! images and too many of them are refused by the supervisor in the called API's shape.

use axum::Router;
use axum::http::header;
use axum::routing::get;
use corral_fixture::Arch;
use corral_tests::loopback::Loopback;
use corral_tests::server::{Dirs, Server};
use serde_json::{Value, json};

/// A PNG signature and header start: enough for the supervisor, which never decodes an image.
const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUg==";

fn data_url() -> String {
    format!("data:image/png;base64,{PNG_BASE64}")
}

/// `status` and the error's message, from the OpenAI shape or Anthropic's.
fn refusal(server: &Server, path: &str, body: Value) -> (u16, String) {
    let response = server.post(path, &body);
    let status = response.status().as_u16();
    let answer: Value = response.json().expect("a JSON error");
    if path.starts_with("/v1/messages") {
        assert_eq!(answer["type"], "error", "{answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
    } else {
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
    }
    let message = answer["error"]["message"].as_str().expect("a message");
    (status, message.to_owned())
}

#[test]
fn images_reach_a_text_only_models_worker_through_every_api_and_are_refused_by_location() {
    let images = Loopback::serve(Router::new().route(
        "/cat.png",
        get(|| async {
            let png = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
            ([(header::CONTENT_TYPE, "image/png")], png.to_vec())
        }),
    ));
    let fetched = format!("http://{}/cat.png", images.address);
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    let config = dirs.write_config("[models.qwen3]\nmax_images = 2\n");
    let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
    let takes_none =
        |location: &str| format!("model `qwen3` takes no images (image at {location})");

    let chat = json!({"model": "qwen3", "max_tokens": 4, "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": fetched}},
            {"type": "image_url", "image_url": {"url": data_url()}},
        ]},
    ]});
    let (status, message) = refusal(&server, "/v1/chat/completions", chat);
    assert_eq!(
        (status, message.as_str()),
        (400, &*takes_none("messages[1].content[1]"))
    );

    let anthropic = json!({"model": "qwen3", "max_tokens": 4, "messages": [
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                          "data": PNG_BASE64}},
        ]},
    ]});
    let (status, message) = refusal(&server, "/v1/messages", anthropic.clone());
    assert_eq!(
        (status, message.as_str()),
        (400, &*takes_none("messages[0].content[0]"))
    );
    let (status, message) = refusal(&server, "/v1/messages/count_tokens", anthropic);
    assert_eq!(
        (status, message.as_str()),
        (400, &*takes_none("messages[0].content[0]"))
    );

    let responses = json!({"model": "qwen3", "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": data_url()},
        ]},
    ]});
    let (status, message) = refusal(&server, "/v1/responses", responses);
    assert_eq!(
        (status, message.as_str()),
        (400, &*takes_none("input[0].content[1]"))
    );

    // Malformed and too many: the supervisor's answers, in each API's shape.
    let bad = json!({"model": "qwen3", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}]}]});
    let (status, message) = refusal(&server, "/v1/chat/completions", bad);
    assert_eq!(status, 400);
    assert!(
        message.starts_with("messages[0].content[0]: the image's base64 is invalid"),
        "{message}"
    );
    let not_image = json!({"model": "qwen3", "max_tokens": 4, "messages": [{"role": "user",
        "content": [{"type": "image", "source": {"type": "base64",
                     "media_type": "text/plain", "data": "aGk="}}]}]});
    let (status, message) = refusal(&server, "/v1/messages", not_image);
    assert_eq!(status, 400);
    assert!(
        message.contains("media type `text/plain` is not an image type"),
        "{message}"
    );
    let by_file = json!({"model": "qwen3", "input": [{"role": "user", "content": [
        {"type": "input_image", "file_id": "file-1"}]}]});
    let (status, message) = refusal(&server, "/v1/responses", by_file);
    assert_eq!(status, 400);
    assert!(
        message.starts_with("input[0].content[0]: images by file_id"),
        "{message}"
    );
    let three = json!({"type": "input_image", "image_url": data_url()});
    let too_many = json!({"model": "qwen3", "input": [{"role": "user",
        "content": [three.clone(), three.clone(), three]}]});
    let (status, message) = refusal(&server, "/v1/responses", too_many);
    assert_eq!(status, 400);
    assert!(
        message.ends_with("max_images of 2 (the first one too many at input[0].content[2])"),
        "{message}"
    );

    // The same server still answers text.
    let text = json!({"model": "qwen3", "max_tokens": 2,
        "messages": [{"role": "user", "content": "Hi"}]});
    assert_eq!(server.post("/v1/chat/completions", &text).status(), 200);
}
