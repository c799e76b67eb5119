//! An agent's conversation with the real SmolLM2, as agent CLIs send it: every turn resends the
//! whole history (the model's last answer, a tool call and its result, a new user message), so
//! the prefix cache must reuse everything the previous turn computed, its generated tokens
//! included, not only its whole blocks. Checked from the usage corral reports, over Anthropic's
//! Messages API (with a system message mid-conversation, streamed and not) and over the Responses
//! API with `store: false` (the whole input replayed each turn).

use corral_tests::server::{Dirs, Server, sse_events};
use serde_json::{Value, json};

const MODEL: &str = "SmolLM2-135M-Instruct";
const TURNS: usize = 6;
/// The city each turn's tool call asks about.
const CITIES: [&str; TURNS] = ["Paris", "Oslo", "Lima", "Cairo", "Tokyo", "Quito"];
/// Reuse the previous turn's prompt must reach, in the usage of every later turn.
const MIN_REUSE: f64 = 0.95;

fn serve() -> (Dirs, Server) {
    let dirs = Dirs::generated([]);
    let gguf = corral_tests::smollm2_gguf();
    let server = Server::start_with_env(&dirs, &[], &[("CORRAL_DEFAULT_MODEL", gguf.as_os_str())]);
    (dirs, server)
}

/// Short: the debug build prefills slowly, and the reuse is a ratio whatever the length.
fn instructions() -> String {
    "You are a careful weather assistant. Answer in one short sentence.".to_owned()
}

fn weather_tool_anthropic() -> Value {
    json!([{"name": "get_weather", "description": "The weather in a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}])
}

fn weather_tool_responses() -> Value {
    json!([{"type": "function", "name": "get_weather", "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}])
}

/// Each turn's prompt and cached token counts; asserts the reuse of every turn after the first.
#[derive(Default)]
struct Reuse {
    turns: Vec<(u64, u64)>,
}

impl Reuse {
    fn record(&mut self, prompt: u64, cached: u64) {
        if let Some(&(previous, _)) = self.turns.last() {
            assert!(
                cached as f64 >= MIN_REUSE * previous as f64,
                "turn {}: {cached} of {prompt} prompt tokens cached, the previous turn's prompt \
                 was {previous}; turns so far (prompt, cached): {:?}",
                self.turns.len() + 1,
                self.turns
            );
        }
        self.turns.push((prompt, cached));
    }
}

fn u64_at(value: &Value, pointer: &str) -> u64 {
    value
        .pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no {pointer} in {value}"))
}

/// One Anthropic turn; returns the answer's text and the usage as `(prompt, cached)`. A streamed
/// turn also checks that `message_start` and `message_delta` report the same prompt split.
fn anthropic_turn(server: &Server, messages: &Value, stream: bool) -> (String, (u64, u64)) {
    let body = json!({
        "model": MODEL, "max_tokens": 16, "temperature": 0, "stream": stream,
        "system": instructions(), "tools": weather_tool_anthropic(), "messages": messages,
    });
    let response = server.post("/v1/messages", &body);
    assert_eq!(response.status(), 200);
    let split = |usage: &Value| {
        let cached = u64_at(usage, "/cache_read_input_tokens");
        (u64_at(usage, "/input_tokens") + cached, cached)
    };
    if !stream {
        let body: Value = response.json().unwrap();
        let text = body["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|block| block["text"].as_str())
            .collect();
        return (text, split(&body["usage"]));
    }
    let (mut text, mut start, mut end) = (String::new(), None, None);
    for data in sse_events(response) {
        let event: Value = serde_json::from_str(&data).unwrap();
        match event["type"].as_str() {
            Some("message_start") => start = Some(split(&event["message"]["usage"])),
            Some("content_block_delta") => {
                text.push_str(event["delta"]["text"].as_str().unwrap_or(""));
            }
            Some("message_delta") => end = Some(split(&event["usage"])),
            _ => {}
        }
    }
    let (start, end) = (start.unwrap(), end.unwrap());
    assert_eq!(start, end, "message_start and message_delta disagree");
    (text, end)
}

#[test]
fn six_anthropic_turns_with_a_mid_conversation_system_message_each_reuse_the_last_turn() {
    let (_dirs, server) = serve();
    let mut messages = vec![json!({"role": "user", "content": "What is the weather in Paris?"})];
    let mut reuse = Reuse::default();
    for turn in 0..TURNS {
        let (answer, (prompt, cached)) = anthropic_turn(&server, &json!(messages), turn % 2 == 1);
        reuse.record(prompt, cached);
        let city = CITIES[(turn + 1) % TURNS];
        let id = format!("toolu_{turn}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": answer},
            {"type": "tool_use", "id": id, "name": "get_weather", "input": {"city": city}},
        ]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": format!("{city}: 21C, clear")},
            {"type": "text", "text": format!("Thanks. And is it warmer than in {city}?")},
        ]}));
        if turn == 2 {
            messages.push(json!({"role": "system", "content": "The user prefers Celsius."}));
        }
    }
    eprintln!("Anthropic turns (prompt, cached): {:?}", reuse.turns);
}

/// One Responses turn, streamed or not; returns the answer's text and `(prompt, cached)`.
fn responses_turn(server: &Server, input: &Value, stream: bool) -> (String, (u64, u64)) {
    let body = json!({
        "model": MODEL, "max_output_tokens": 16, "temperature": 0, "stream": stream,
        "store": false, "instructions": instructions(), "tools": weather_tool_responses(),
        "input": input,
    });
    let response = server.post("/v1/responses", &body);
    assert_eq!(response.status(), 200);
    let object = if stream {
        sse_events(response)
            .map(|data| serde_json::from_str::<Value>(&data).unwrap())
            // `incomplete` when the answer reached `max_output_tokens`.
            .find(|event| {
                ["response.completed", "response.incomplete"]
                    .contains(&event["type"].as_str().unwrap_or(""))
            })
            .map(|event| event["response"].clone())
            .unwrap()
    } else {
        response.json().unwrap()
    };
    let text = object["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|part| part["text"].as_str().map(str::to_owned))
        .collect();
    let usage = &object["usage"];
    let split = (
        u64_at(usage, "/input_tokens"),
        u64_at(usage, "/input_tokens_details/cached_tokens"),
    );
    (text, split)
}

#[test]
fn six_responses_turns_replaying_their_whole_input_each_reuse_the_last_turn() {
    let (_dirs, server) = serve();
    let mut input = vec![json!({"type": "message", "role": "user",
                                "content": "What is the weather in Paris?"})];
    let mut reuse = Reuse::default();
    for turn in 0..TURNS {
        let (answer, (prompt, cached)) = responses_turn(&server, &json!(input), turn % 2 == 1);
        reuse.record(prompt, cached);
        let city = CITIES[(turn + 1) % TURNS];
        let call_id = format!("call_{turn}");
        input.push(json!({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": answer}]}));
        input.push(
            json!({"type": "function_call", "call_id": call_id, "name": "get_weather",
                          "arguments": json!({"city": city}).to_string()}),
        );
        input.push(json!({"type": "function_call_output", "call_id": call_id,
                          "output": format!("{city}: 21C, clear")}));
        input.push(json!({"type": "message", "role": "user",
                          "content": format!("Thanks. And is it warmer than in {city}?")}));
    }
    eprintln!("Responses turns (prompt, cached): {:?}", reuse.turns);
}
