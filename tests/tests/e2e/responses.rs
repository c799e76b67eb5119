//! The OpenAI Responses API through `corral serve`, with the official `openai` SDK
//! (`tests/sdk/openai_responses.py`): text, streaming, a function-call round trip continued by
//! `previous_response_id`, structured outputs, and the store's `retrieve`, `delete` and 404s.

use corral_fixture::Arch;
use corral_tests::sdk;
use corral_tests::server::{Dirs, Server, sse_events};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

fn check(server: &Server, check: &str, model: &str) -> Value {
    let stdout = sdk::run("openai_responses.py", &server.url("/v1"), &[check, model]);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("{check} printed {stdout}"))
}

#[test]
fn the_openai_sdk_creates_streams_continues_and_deletes_responses() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    let server = Server::start(&dirs);
    check(&server, "text", "qwen3");
    let streamed = check(&server, "stream", "qwen3");
    assert!(streamed["call"]["city"].is_string(), "{streamed}");
    let trip = check(&server, "round-trip", "qwen3");
    assert_eq!(trip["call"]["name"], "get_weather", "{trip}");
    check(&server, "json-schema", "qwen3");
}

#[test]
fn a_killed_worker_ends_its_response_stream_with_response_failed() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = Server::start(&dirs);
    let body = json!({"model": "llama", "input": "Hi", "stream": true,
        "max_output_tokens": 3000});
    let mut events = sse_events(server.post("/v1/responses", &body));
    let created: Value = serde_json::from_str(&events.next().unwrap()).unwrap();
    assert_eq!(created["type"], "response.created");
    let workers = server.worker_pids();
    assert_eq!(workers.len(), 1, "{workers:?}");
    kill(Pid::from_raw(workers[0] as i32), Signal::SIGKILL).unwrap();
    // The stream ends in `response.failed`, not in the client's timeout (its hang guard).
    let last: Value = serde_json::from_str(&events.last().unwrap()).unwrap();
    assert_eq!(last["type"], "response.failed", "{last}");
    assert_eq!(last["response"]["id"], created["response"]["id"]);
    assert_eq!(last["response"]["status"], "failed");
    assert!(
        last["response"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("pid"),
        "{last}"
    );
}

#[test]
fn smollm2_calls_the_weather_tool_and_answers_over_previous_response_id() {
    let dirs = Dirs::generated([]);
    let gguf = corral_tests::smollm2_gguf();
    let server = Server::start_with_env(&dirs, &[], &[("CORRAL_DEFAULT_MODEL", gguf.as_os_str())]);
    let trip = check(&server, "round-trip", "SmolLM2-135M-Instruct");
    assert_eq!(trip["call"]["name"], "get_weather", "{trip}");
    assert!(
        !trip["answer"].as_str().unwrap_or("").trim().is_empty(),
        "{trip}"
    );
    eprintln!("SmolLM2's Responses round trip: {trip}");
}
