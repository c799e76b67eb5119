//! Gemma 4's thought channel and calls as its template spells them, each checked whole, at
//! every cut and char by char.

use serde_json::json;

use super::*;

use ReasoningStart::{Maybe, Off};
use ToolFormat::Gemma4;

#[test]
fn a_thought_then_calls_in_its_own_notation() {
    let tools = [
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}),
    ];
    let output = "<|channel>thought\nThe user wants the weather.<channel|>\
                  <|tool_call>call:get_weather{city:<|\"|>Paris, \"France\"<|\"|>,days:3}<tool_call|>\
                  <|tool_call>call:now{}<tool_call|>";
    assert_eq!(
        parse_clean(config(Gemma4, Maybe, &tools), output),
        [
            reasoning("The user wants the weather."),
            call("get_weather", r#"{"city":"Paris, \"France\"","days":3}"#),
            call("now", "{}"),
        ]
    );
}

#[test]
fn nested_values_bare_keys_and_json_strings_are_read() {
    let output = "Let me look.<|tool_call>call:search{filters:{lang:[<|\"|>en<|\"|>,\"fr\"],\
                  exact:true,limit:2.5,cursor:null},query:<|\"|>a}b,c<|\"|>}<tool_call|>";
    assert_eq!(
        parse_clean(config(Gemma4, Off, &[]), output),
        [
            content("Let me look."),
            call(
                "search",
                r#"{"filters":{"lang":["en","fr"],"exact":true,"limit":2.5,"cursor":null},"query":"a}b,c"}"#
            ),
        ]
    );
}

#[test]
fn a_call_that_is_not_gemmas_notation_stays_text() {
    for output in [
        "<|tool_call>get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
        "<|tool_call>call:get_weather{city:<|\"|>Paris}<tool_call|>",
        "<|tool_call>call:get weather{}<tool_call|>",
    ] {
        let (fragments, malformed) = parse(config(Gemma4, Off, &[]), output);
        assert_eq!(fragments, [content(output)], "{output}");
        assert!(malformed.is_some(), "{output}");
    }
}

/// A `<think>` block is not Gemma's thinking: it stays in the answer.
#[test]
fn only_the_thought_channel_is_reasoning() {
    let output = "<think>no</think>fine";
    assert_eq!(
        parse(config(Gemma4, Maybe, &[]), output),
        (vec![content(output)], None)
    );
}

#[test]
fn a_prompt_that_closed_the_channel_starts_the_answer() {
    let markers = Gemma4.thinking_markers();
    let disabled = "<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>";
    assert_eq!(prompt_opens_reasoning(disabled, markers), Off);
    assert_eq!(
        prompt_opens_reasoning("<|turn>user\nHi<turn|>\n<|turn>model\n", markers),
        Maybe
    );
}

#[test]
fn results_fold_into_the_turn_whose_calls_they_answer() {
    let messages = [
        json!({"role": "user", "content": "Weather?"}),
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": {}}},
            {"id": "b", "type": "function", "function": {"name": "now", "arguments": {}}}]}),
        json!({"role": "tool", "tool_call_id": "b", "content": "noon"}),
        json!({"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "{\"temp\": 21}"}]}),
        json!({"role": "user", "content": "Thanks"}),
        json!({"role": "tool", "name": "stray", "content": "x"}),
    ];
    let folded = gemma4_tool_responses(&messages);
    assert_eq!(folded.len(), 4);
    assert_eq!(
        folded[1]["tool_responses"],
        json!([{"name": "now", "response": "noon"},
               {"name": "get_weather", "response": {"temp": 21}}])
    );
    assert_eq!(folded[2], messages[4]);
    assert_eq!(folded[3], messages[5]);
}
