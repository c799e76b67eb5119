//! The rewrite that teaches tools to a model whose template has none.

use serde_json::json;

use super::*;

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }})
}

const DESCRIPTION: &str = "# Tools\n\nYou may call one or more functions to assist with the \
user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n\
<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": \
{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}\n</tools>\n\n\
For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": \
<args-json-object>}\n</tool_call>";

#[test]
fn tools_go_into_a_new_system_message() {
    let messages = [json!({"role": "user", "content": "Weather in Paris?"})];
    assert_eq!(
        rewrite_messages(&messages, &[weather_tool()]),
        [
            json!({"role": "system", "content": DESCRIPTION}),
            messages[0].clone()
        ]
    );
}

#[test]
fn tools_are_appended_to_the_first_system_message() {
    let messages = [
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "Hi"}),
    ];
    let rewritten = rewrite_messages(&messages, &[weather_tool()]);
    assert_eq!(
        rewritten[0],
        json!({"role": "system", "content": format!("Be brief.\n\n{DESCRIPTION}")})
    );
    assert_eq!(rewritten[1], messages[1]);
}

#[test]
fn past_calls_and_results_become_text() {
    let messages = [
        json!({"role": "user", "content": "Weather in Paris and Rome?"}),
        json!({"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": "call_2", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
        ]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "18C"}),
        json!({"role": "tool", "tool_call_id": "call_2", "content": "25C"}),
        json!({"role": "user", "content": "Thanks"}),
        json!({"role": "tool", "tool_call_id": "call_3", "content": null}),
    ];
    let rewritten = rewrite_messages(&messages, &[]);
    assert_eq!(
        rewritten,
        [
            messages[0].clone(),
            json!({"role": "assistant", "content": "Checking.\n<tool_call>\n{\"name\": \
                   \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n\
                   <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \
                   \"Rome\"}}\n</tool_call>"}),
            json!({"role": "user", "content": "The tool get_weather returned: 18C\n\
                   The tool get_weather returned: 25C"}),
            messages[4].clone(),
            json!({"role": "user", "content": "The tool returned: "}),
        ]
    );
}

#[test]
fn a_call_without_content_starts_with_its_block() {
    let messages = [json!({"role": "assistant", "content": null, "tool_calls": [
        {"function": {"name": "now", "arguments": "not json"}},
    ]})];
    assert_eq!(
        rewrite_messages(&messages, &[]),
        [
            json!({"role": "assistant", "content": "<tool_call>\n{\"name\": \"now\", \
                 \"arguments\": \"not json\"}\n</tool_call>"})
        ]
    );
}

#[test]
fn the_rewritten_call_parses_back_to_the_same_call() {
    let messages = [json!({"role": "assistant", "content": null, "tool_calls": [
        {"function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
    ]})];
    let rewritten = rewrite_messages(&messages, &[]);
    let text = rewritten[0]["content"].as_str().unwrap_or_default();
    let parser_config = config(ToolFormat::Hermes, ReasoningStart::Off, &[]);
    assert_eq!(
        feed(parser_config, [text]).0,
        [call("get_weather", r#"{"city":"Paris"}"#)]
    );
}
