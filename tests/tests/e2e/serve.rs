//! `corral serve` end to end: the real supervisor, real worker processes, generated models, HTTP
//! on 127.0.0.1.

use std::ffi::OsStr;

use corral_fixture::Arch;
use corral_tests::server::{Dirs, Server, alive, chat, client, sse_events};
use corral_tests::wait_until;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

#[test]
fn serves_chat_and_completions_streaming_and_not() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    let server = Server::start(&dirs);
    let models: Value = client()
        .get(server.url("/v1/models"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(models["data"][0]["id"], "qwen3");
    assert_eq!(
        client().get(server.url("/health")).send().unwrap().status(),
        200
    );

    let response = server.post("/v1/chat/completions", &chat("qwen3", 8, false));
    assert_eq!(response.status(), 200);
    let body: Value = response.json().unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() <= 8);

    let response = server.post(
        "/v1/completions",
        &json!({"model": "qwen3", "prompt": "Once", "max_tokens": 4, "temperature": 0}),
    );
    let body: Value = response.json().unwrap();
    assert_eq!(body["object"], "text_completion");

    let events: Vec<String> =
        sse_events(server.post("/v1/chat/completions", &chat("qwen3", 6, true))).collect();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(usage["usage"]["prompt_tokens"], body_prompt_tokens(&server));
}

fn body_prompt_tokens(server: &Server) -> Value {
    let body: Value = server
        .post("/v1/chat/completions", &chat("qwen3", 1, false))
        .json()
        .unwrap();
    body["usage"]["prompt_tokens"].clone()
}

#[test]
fn two_models_stream_at_once_each_in_its_own_process() {
    let dirs = Dirs::with_models(&[Arch::Llama, Arch::Qwen2]);
    let server = Server::start(&dirs);
    let streams: Vec<_> = ["llama", "qwen2"]
        .into_iter()
        .map(|model| {
            let response = server.post("/v1/chat/completions", &chat(model, 200, true));
            let mut events = sse_events(response);
            events.next().expect("first chunk");
            events
        })
        .collect();
    // Both streams are open at this moment, so both workers run.
    let workers = server.worker_pids();
    assert_eq!(workers.len(), 2, "{workers:?}");
    for events in streams {
        assert_eq!(events.last().as_deref(), Some("[DONE]"));
    }
}

#[test]
fn a_killed_worker_fails_its_stream_and_is_replaced() {
    let dirs = Dirs::with_models(&[Arch::Llama, Arch::Qwen3]);
    let server = Server::start(&dirs);
    let other = server.post("/v1/chat/completions", &chat("qwen3", 300, true));
    let mut other_events = sse_events(other);
    other_events.next().unwrap();
    let victim_stream = server.post("/v1/chat/completions", &chat("llama", 3000, true));
    let mut victim_events = sse_events(victim_stream);
    victim_events.next().unwrap();
    let before: Vec<u32> = server.worker_pids();
    assert_eq!(before.len(), 2);
    // The llama worker is the younger one.
    let victim = *before.iter().max().unwrap();
    kill(Pid::from_raw(victim as i32), Signal::SIGKILL).unwrap();
    // The stream ends in an error, not in the client's timeout (its hang guard).
    let last = victim_events.last().unwrap();
    let error: Value = serde_json::from_str(&last).unwrap();
    assert!(
        error["error"]["message"].as_str().unwrap().contains("pid"),
        "{error}"
    );
    // The other model's stream is untouched.
    assert_eq!(other_events.last().as_deref(), Some("[DONE]"));
    // The next request is served by a new worker.
    let response = server.post("/v1/chat/completions", &chat("llama", 2, false));
    assert_eq!(response.status(), 200);
    assert!(!server.worker_pids().contains(&victim));
}

#[test]
fn killing_the_supervisor_ends_every_worker_and_a_new_one_starts_cleanly() {
    let dirs = Dirs::with_models(&[Arch::Llama, Arch::Qwen3]);
    let server = Server::start(&dirs);
    for model in ["llama", "qwen3"] {
        assert_eq!(
            server
                .post("/v1/chat/completions", &chat(model, 2, false))
                .status(),
            200
        );
    }
    let workers = server.worker_pids();
    assert_eq!(workers.len(), 2);
    let mut server = server;
    server.signal(Signal::SIGKILL);
    server.wait();
    wait_until(
        &format!("the workers {workers:?} to end with the supervisor"),
        || workers.iter().all(|&pid| !alive(pid)),
    );
    drop(server);
    let again = Server::start(&dirs);
    assert_eq!(
        again
            .post("/v1/chat/completions", &chat("llama", 2, false))
            .status(),
        200
    );
}

#[test]
fn bad_requests_get_openai_errors_and_the_server_keeps_serving() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = Server::start(&dirs);
    let raw = |body: &'static [u8]| {
        client()
            .post(server.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap()
    };
    let cases: Vec<(reqwest::blocking::Response, u16)> = vec![
        (raw(b"{not json"), 400),
        (raw(b"{\"model\": 5, \"messages\": []}"), 400),
        (raw(b"\xff\xfe{}"), 400),
        (
            server.post(
                "/v1/chat/completions",
                &json!({"model": "llama", "messages": []}),
            ),
            400,
        ),
        (
            server.post("/v1/chat/completions", &chat("no-such-model", 2, false)),
            404,
        ),
        (
            server.post(
                "/v1/completions",
                &json!({"model": "llama", "prompt": "word ".repeat(9000), "max_tokens": 2}),
            ),
            400,
        ),
    ];
    for (response, status) in cases {
        assert_eq!(response.status().as_u16(), status);
        let body: Value = response.json().unwrap();
        assert!(body["error"]["message"].is_string(), "{body}");
        assert!(body["error"]["type"].is_string(), "{body}");
    }
    assert_eq!(
        server
            .post("/v1/chat/completions", &chat("llama", 2, false))
            .status(),
        200
    );
    // Just over the limit: the server has read nearly all of it before it refuses, so the
    // client's write completes and the answer is read, instead of racing into a broken pipe.
    let response = client()
        .post(server.url("/v1/completions"))
        .header("content-type", "application/json")
        .body(vec![b' '; corral::api::MAX_BODY_BYTES + 1024])
        .send()
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().unwrap();
    assert!(body["error"]["message"].is_string(), "{body}");
}

/// Each API's own words for a prompt over the context, the ones its clients act on: OpenAI's
/// `context_length_exceeded`, Anthropic's `prompt is too long: N tokens > M maximum`.
#[test]
fn a_prompt_over_the_context_gets_each_apis_context_error() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = Server::start(&dirs);
    let long = "word ".repeat(9000);
    for (path, body) in [
        (
            "/v1/chat/completions",
            json!({"model": "llama", "messages": [{"role": "user", "content": long}]}),
        ),
        ("/v1/responses", json!({"model": "llama", "input": long})),
    ] {
        let response = server.post(path, &body);
        assert_eq!(response.status().as_u16(), 400, "{path}");
        let body: Value = response.json().unwrap();
        assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("This model's maximum context length is "),
            "{message}"
        );
    }
    let response = server.post(
        "/v1/messages",
        &json!({"model": "llama", "max_tokens": 8, "messages": [{"role": "user", "content": long}]}),
    );
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    let numbers: Vec<&str> = message
        .strip_prefix("prompt is too long: ")
        .and_then(|rest| rest.strip_suffix(" maximum"))
        .map(|rest| rest.split(" tokens > ").collect())
        .unwrap_or_default();
    assert_eq!(numbers.len(), 2, "{message}");
    let prompt: u32 = numbers[0].parse().unwrap();
    let context: u32 = numbers[1].parse().unwrap();
    assert!(prompt > context, "{message}");
}

#[test]
fn sigterm_drains_stops_every_worker_and_exits_zero() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let mut server = Server::start(&dirs);
    assert_eq!(
        server
            .post("/v1/chat/completions", &chat("llama", 2, false))
            .status(),
        200
    );
    let workers = server.worker_pids();
    assert_eq!(workers.len(), 1);
    server.signal(Signal::SIGTERM);
    assert!(server.wait().success());
    assert!(workers.iter().all(|&pid| !alive(pid)));
    assert!(server.state_dir.join("run").exists());
}

#[test]
fn a_model_whose_worker_is_killed_while_loading_gets_503_with_retry_after_and_others_still_serve() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    dirs.add_copy("llama", "broken");
    let worker = dirs.worker_killed_loading("broken");
    let server = Server::start_with(&dirs, &[OsStr::new("--worker-binary"), worker.as_os_str()]);
    for _ in 0..2 {
        let response = server.post("/v1/chat/completions", &chat("broken", 2, false));
        assert_eq!(response.status(), 503);
        let retry_after: u64 = response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(retry_after >= 1);
        let body: Value = response.json().unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("broken"), "{message}");
    }
    assert_eq!(
        server
            .post("/v1/chat/completions", &chat("llama", 2, false))
            .status(),
        200
    );
}
