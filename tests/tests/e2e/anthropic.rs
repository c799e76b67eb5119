//! The Anthropic Messages API through `corral serve`, with the official `anthropic` SDK
//! (`tests/sdk/anthropic_messages.py`): text, streams, stop sequences, usage and count_tokens,
//! structured outputs, a tool round trip on a fixture and on the real instruct model, thinking
//! blocks, the typed errors, API keys, and a recorded Claude Code request served through a
//! `claude-*` alias.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};

use corral_fixture::Arch;
use corral_tests::server::{Dirs, Server, client};
use corral_tests::{THINKING_TEMPLATE, sdk};
use serde_json::{Value, json};

fn check(server: &Server, check: &str, model: &str, extra: &[&str]) -> Value {
    let args: Vec<&str> = [check, model]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    // The SDK's base URL is the server's root: it adds /v1 itself.
    let stdout = sdk::run("anthropic_messages.py", &server.url(""), &args);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("{check} printed {stdout}"))
}

#[test]
fn the_sdk_creates_streams_counts_and_calls_tools_on_a_fixture() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    let server = Server::start(&dirs);
    check(&server, "basics", "qwen3", &[]);
    check(&server, "json-schema", "qwen3", &[]);
    let trip = check(&server, "tool-round-trip", "qwen3", &[]);
    assert_eq!(trip["call"]["name"], "get_weather", "{trip}");
    check(&server, "errors", "qwen3", &[]);
}

#[test]
fn a_thinking_model_answers_with_a_thinking_block_and_thinking_disabled_reaches_its_template() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    dirs.set_chat_template("qwen3", THINKING_TEMPLATE);
    let server = Server::start(&dirs);
    check(&server, "thinking", "qwen3", &[]);
}

/// DeepSeek-R1's way: the generation prompt opens the think block, so the output starts inside
/// it; past answers lose their thinking (which is how the template shows it knows `</think>`).
const OPENED_THINKING_TEMPLATE: &str = r#"{%- for message in messages %}
{%- set content = message.content.split('</think>')[-1] if message.role == 'assistant' else message.content %}
{{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n<think>\n' }}
{%- endif %}"#;

#[test]
fn a_thinking_budget_closes_the_reasoning_block_and_the_answer_follows() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    dirs.set_chat_template("qwen3", OPENED_THINKING_TEMPLATE);
    let server = Server::start(&dirs);
    check(&server, "thinking-budget", "qwen3", &[]);
}

#[test]
fn smollm2_calls_the_weather_tool_and_answers_from_its_result_through_the_sdk() {
    let dirs = Dirs::generated([]);
    let gguf = corral_tests::smollm2_gguf();
    let server = Server::start_with_env(&dirs, &[], &[("CORRAL_DEFAULT_MODEL", gguf.as_os_str())]);
    let trip = check(&server, "tool-round-trip", "SmolLM2-135M-Instruct", &[]);
    assert_eq!(trip["call"]["name"], "get_weather", "{trip}");
    eprintln!("SmolLM2's round trip: {trip}");
}

#[test]
fn an_api_key_guards_the_messages_routes_with_anthropics_401() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    let args = [OsStr::new("--api-key"), OsStr::new("client-key")];
    let server = Server::start_with(&dirs, &args);
    check(&server, "authentication", "qwen3", &["client-key"]);
    for path in ["/v1/messages", "/v1/messages/count_tokens"] {
        let response = client()
            .post(server.url(path))
            .header("anthropic-version", "2023-06-01")
            .json(&json!({}))
            .send()
            .unwrap();
        assert_eq!(response.status(), 401);
        let body: Value = response.json().unwrap();
        assert_eq!(body["type"], "error", "{body}");
        assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    }
}

/// The recorded Claude Code request, shortened to a few tokens of answer: random weights would
/// otherwise write its 32,000.
fn claude_code_request() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/claude_code_request.json");
    let mut body: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    body["max_tokens"] = json!(16);
    body
}

/// `(event, data)` pairs as they arrive.
fn sse(response: reqwest::blocking::Response) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    let mut name = String::new();
    for line in BufReader::new(response).lines().map_while(Result::ok) {
        if let Some(event) = line.strip_prefix("event: ") {
            name = event.to_owned();
        } else if let Some(data) = line.strip_prefix("data: ") {
            events.push((name.clone(), serde_json::from_str(data).unwrap()));
        }
    }
    events
}

#[test]
fn a_recorded_claude_code_request_is_served_through_a_claude_alias() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    let config = dirs.write_config("[aliases]\n\"claude-*\" = \"qwen3\"\n");
    let server = Server::start_with(&dirs, &[OsStr::new("--config"), config.as_os_str()]);
    let body = claude_code_request();
    let response = client()
        .post(server.url("/v1/messages"))
        .header("x-api-key", "unused")
        .header("anthropic-version", "2023-06-01")
        .header(
            "anthropic-beta",
            "claude-code-20250219,interleaved-thinking-2025-05-14",
        )
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = sse(response);
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names[..2], ["message_start", "ping"], "{names:?}");
    assert_eq!(
        names[names.len() - 2..],
        ["message_delta", "message_stop"],
        "{names:?}"
    );
    let start = &events[0].1["message"];
    assert_eq!(start["model"], "claude-sonnet-4-5-20250929");
    let prompt = start["usage"]["input_tokens"].as_u64().unwrap();
    let finish = &events[events.len() - 2].1;
    assert!(
        ["max_tokens", "end_turn", "tool_use"]
            .contains(&finish["delta"]["stop_reason"].as_str().unwrap()),
        "{finish}"
    );
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "{data}");
    }

    let counted: Value = server
        .post("/v1/messages/count_tokens", &body)
        .json()
        .unwrap();
    assert_eq!(counted["input_tokens"].as_u64(), Some(prompt), "{counted}");
}

#[test]
fn the_messages_route_never_answers_in_the_openai_shape() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    let server = Server::start(&dirs);
    let url = server.url("/v1/messages");
    let ask =
        json!({"model": "qwen3", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]});
    let mut unknown = ask.clone();
    unknown["model"] = json!("claude-opus-4-1");
    let mut openai_style = ask.clone();
    openai_style["messages"] =
        json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]);
    let requests = [
        (
            client()
                .post(&url)
                .header("content-type", "application/json")
                .body("{"),
            400,
        ),
        (
            client()
                .post(&url)
                .json(&json!({"model": "qwen3", "messages": []})),
            400,
        ),
        (client().post(&url).json(&unknown), 404),
        (client().post(&url).json(&openai_style), 400),
        (client().get(&url), 405),
        (
            client().post(server.url("/v1/messages/batches")).json(&ask),
            404,
        ),
    ];
    for (request, status) in requests {
        let response = request.send().unwrap();
        assert_eq!(response.status(), status);
        let body: Value = response.json().unwrap();
        assert_eq!(body["type"], "error", "{body}");
        assert!(
            body["error"]["type"].is_string() && body["error"]["message"].is_string(),
            "{body}"
        );
        assert!(
            body["error"].get("code").is_none() && body["error"].get("param").is_none(),
            "{body}"
        );
    }
}
