//! GLM-4.5's calls as its template spells them, each checked whole, at every cut and char by
//! char.

use serde_json::json;

use super::*;

use ReasoningStart::Maybe;
use ToolFormat::Glm;

#[test]
fn thinking_then_a_call_with_typed_arguments() {
    let tools = [
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                         "zip": {"type": "string"}}}}}),
    ];
    let output = "\n<think>The user wants the weather.</think>\n<tool_call>get_weather\n\
                  <arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n\
                  <arg_key>days</arg_key>\n<arg_value>3</arg_value>\n\
                  <arg_key>zip</arg_key>\n<arg_value>75001</arg_value>\n</tool_call>";
    assert_eq!(
        parse_clean(config(Glm, Maybe, &tools), output),
        [
            reasoning("The user wants the weather."),
            call("get_weather", r#"{"city":"Paris","days":3,"zip":"75001"}"#),
        ]
    );
}

#[test]
fn undeclared_values_are_json_when_they_parse_and_text_otherwise() {
    let output = "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>rust \"book\"</arg_value>\n\
                  <arg_key>filters</arg_key>\n<arg_value>{\"lang\": [\"en\"]}</arg_value>\n\
                  <arg_key>exact</arg_key>\n<arg_value>true</arg_value>\n</tool_call>\
                  <tool_call>now\n</tool_call>";
    assert_eq!(
        parse_clean(config(Glm, Maybe, &[]), output),
        [
            call(
                "search",
                r#"{"query":"rust \"book\"","filters":{"lang":["en"]},"exact":true}"#
            ),
            call("now", "{}"),
        ]
    );
}

#[test]
fn a_hermes_body_is_not_a_glm_call() {
    let output = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>";
    let (fragments, malformed) = parse(config(Glm, Maybe, &[]), output);
    assert_eq!(fragments, [content(output)]);
    assert!(malformed.is_some());
}

#[test]
fn a_value_without_its_key_is_not_a_call() {
    let output = "<tool_call>get_weather\n<arg_value>Paris</arg_value>\n</tool_call>";
    let (fragments, malformed) = parse(config(Glm, Maybe, &[]), output);
    assert_eq!(fragments, [content(output)]);
    assert!(malformed.is_some());
}
