//! Agents' requests through `corral serve`, as the official OpenAI Python SDK sees them
//! (`tests/sdk/openai_agents.py`): forced tool calls whose arguments validate against the tool's
//! schema even from random weights, structured outputs streamed and not, the errors, and with
//! the real instruct model a whole tool round trip and JSON mode.

use corral_fixture::Arch;
use corral_tests::server::{Dirs, Server};
use corral_tests::{THINKING_TEMPLATE, sdk};
use serde_json::Value;

fn check(server: &Server, check: &str, model: &str, seeds: u32) -> Value {
    let stdout = sdk::run(
        "openai_agents.py",
        &server.url("/v1"),
        &[check, model, &seeds.to_string()],
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("{check} printed {stdout}"))
}

#[test]
fn forced_tool_calls_from_random_weights_validate_on_twenty_seeds() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    let server = Server::start(&dirs);
    let required = check(&server, "required-calls", "qwen3", 20);
    assert!(required["calls"].as_u64().unwrap() >= 20, "{required}");
    check(&server, "named-calls", "qwen3", 5);
    check(&server, "auto-calls", "qwen3", 5);
}

#[test]
fn structured_outputs_validate_and_bad_requests_name_their_field() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = Server::start(&dirs);
    check(&server, "json-schema", "llama", 10);
    check(&server, "completion-grammar", "llama", 5);
    check(&server, "bad-input", "llama", 1);
}

#[test]
fn a_thinking_model_returns_its_reasoning_apart_and_the_switch_reaches_its_template() {
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    dirs.set_chat_template("qwen3", THINKING_TEMPLATE);
    let server = Server::start(&dirs);
    check(&server, "reasoning", "qwen3", 3);
}

#[test]
fn smollm2_calls_the_weather_tool_answers_from_its_result_and_writes_json() {
    let dirs = Dirs::generated([]);
    let gguf = corral_tests::smollm2_gguf();
    let server = Server::start_with_env(&dirs, &[], &[("CORRAL_DEFAULT_MODEL", gguf.as_os_str())]);
    let trip = check(&server, "round-trip", "SmolLM2-135M-Instruct", 1);
    assert_eq!(trip["call"]["name"], "get_weather", "{trip}");
    eprintln!("SmolLM2's round trip: {trip}");
    let answer = check(&server, "json-object", "SmolLM2-135M-Instruct", 1);
    assert!(answer["answer"].is_object(), "{answer}");
}
