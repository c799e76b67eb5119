//! DeepSeek V3.1's and V3's calls and thinking as their templates spell them, each checked
//! whole, at every cut and char by char; the template's detection and its conversation.

use serde_json::json;

use super::detect::{id, shipped_template, tokenizer};
use super::*;

use ReasoningStart::{Inside, Maybe, Off};
use ToolFormat::{DeepSeekV3, DeepSeekV31};

const CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const CALLS_END: &str = "<｜tool▁calls▁end｜>";
const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const CALL_END: &str = "<｜tool▁call▁end｜>";
const SEP: &str = "<｜tool▁sep｜>";

fn v31_call(name: &str, arguments: &str) -> String {
    format!("{CALL_BEGIN}{name}{SEP}{arguments}{CALL_END}")
}

fn v3_call(name: &str, arguments: &str) -> String {
    format!("{CALL_BEGIN}function{SEP}{name}\n```json\n{arguments}\n```{CALL_END}")
}

#[test]
fn v31_calls_after_thinking_the_prompt_opened() {
    let output = format!(
        "The user wants the weather.</think>Let me look.{CALLS_BEGIN}{}{}{CALLS_END}",
        v31_call("get_weather", r#"{"city": "Paris, \"France\"", "days": 3}"#),
        v31_call("now", "{}"),
    );
    assert_eq!(
        parse_clean(config(DeepSeekV31, Inside, &[]), &output),
        [
            reasoning("The user wants the weather."),
            content("Let me look."),
            call("get_weather", r#"{"city":"Paris, \"France\"","days":3}"#),
            call("now", "{}"),
        ]
    );
}

#[test]
fn v3_and_r1_fenced_calls_are_read_in_either_format() {
    let output = format!(
        "{CALLS_BEGIN}{}\n{}{CALLS_END}",
        v3_call("get_weather", "{\"city\": \"日本\"}"),
        v31_call("now", "{}")
    );
    for format in [DeepSeekV3, DeepSeekV31] {
        assert_eq!(
            parse_clean(config(format, Maybe, &[]), &output),
            [call("get_weather", r#"{"city":"日本"}"#), call("now", "{}")]
        );
    }
}

/// A model that stops at its end-of-sentence token before closing its calls still called.
#[test]
fn an_unclosed_section_or_call_is_read_at_the_end() {
    for output in [
        format!("{CALLS_BEGIN}{}", v31_call("now", "{}")),
        format!("{CALLS_BEGIN}{CALL_BEGIN}now{SEP}{{}}"),
        format!("{CALLS_BEGIN}{CALL_BEGIN}now{SEP}{{}}<｜tool▁call"),
    ] {
        assert_eq!(
            parse_clean(config(DeepSeekV31, Off, &[]), &output),
            [call("now", "{}")],
            "{output}"
        );
    }
}

#[test]
fn a_section_that_is_not_calls_stays_text() {
    for output in [
        format!("{CALLS_BEGIN}{CALLS_END}"),
        format!("{CALLS_BEGIN}now{SEP}{{}}{CALLS_END}"),
        format!("{CALLS_BEGIN}{CALL_BEGIN}now{{}}{CALL_END}{CALLS_END}"),
        format!("{CALLS_BEGIN}{}{CALLS_END}", v31_call("now", "{")),
        format!("{CALLS_BEGIN}{}{CALLS_END}", v31_call("get weather", "{}")),
        format!("{CALLS_BEGIN}{CALL_BEGIN}type{SEP}now\n```json\n{{}}\n```{CALL_END}{CALLS_END}"),
        format!("{CALLS_BEGIN}{CALL_BEGIN}function{SEP}now\n{{}}{CALL_END}{CALLS_END}"),
    ] {
        let (fragments, malformed) = parse(config(DeepSeekV31, Off, &[]), &output);
        assert_eq!(fragments, [content(&output)], "{output}");
        assert!(malformed.is_some(), "{output}");
    }
}

#[test]
fn the_v31_template_is_deepseek_with_its_markers_kept() {
    let markers = [CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP];
    let mut added: Vec<(&str, bool)> = markers.iter().map(|&marker| (marker, true)).collect();
    added.extend([("<think>", false), ("</think>", false)]);
    let vocab = tokenizer(&added);
    let formats = ModelFormats::detect(Some(&shipped_template("deepseek-v3.1.jinja")), &vocab);
    let mut kept = markers.map(|marker| id(&vocab, marker));
    kept.sort_unstable();
    assert_eq!(
        formats,
        ModelFormats {
            tool_format: DeepSeekV31,
            // Its template writes past calls, but the tools are corral's to describe.
            native_tools: false,
            reasoning: true,
            kept_tokens: kept.to_vec(),
        }
    );
    let fenced = "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' \
                  + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}";
    let formats = ModelFormats::detect(Some(fenced), &tokenizer(&[]));
    assert_eq!(formats.tool_format, DeepSeekV3);
}

#[test]
fn thinking_follows_the_switch_the_template_reads() {
    let on = json!({"enable_thinking": true});
    let kwargs = deepseek_thinking(DeepSeekV31, on.as_object()).unwrap();
    assert_eq!(kwargs["thinking"], true);
    let off = json!({"enable_thinking": false, "reasoning_effort": "none"});
    let kwargs = deepseek_thinking(DeepSeekV3, off.as_object()).unwrap();
    assert_eq!(kwargs["thinking"], false);
    let own = json!({"enable_thinking": true, "thinking": false});
    assert_eq!(deepseek_thinking(DeepSeekV31, own.as_object()), None);
    assert_eq!(deepseek_thinking(ToolFormat::Hermes, on.as_object()), None);
    assert_eq!(deepseek_thinking(DeepSeekV31, None), None);
}

#[test]
fn tools_are_described_in_deepseeks_words_and_arguments_are_text() {
    let tools = [
        json!({"type": "function", "function": {"name": "get_weather",
        "description": "Current weather", "parameters": {"type": "object"}}}),
    ];
    let messages = [
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "Weather?"}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
            "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}),
    ];
    let out = deepseek_messages(&messages, &tools, DeepSeekV31, true);
    assert_eq!(out.len(), 4);
    assert_eq!(out[0], messages[0]);
    let description = out[1]["content"].as_str().unwrap();
    assert!(description.starts_with("## Tools\n"), "{description}");
    assert!(description.contains("### get_weather\nDescription: Current weather\n"));
    assert!(description.contains(&v31_call("tool_call_name", "tool_call_arguments")));
    assert_eq!(
        out[3]["tool_calls"][0]["function"]["arguments"],
        r#"{"city":"Paris"}"#
    );
    let fenced = deepseek_messages(&messages, &tools, DeepSeekV3, true);
    let description = fenced[1]["content"].as_str().unwrap();
    assert!(description.contains(&v3_call("tool_call_name", "tool_call_arguments")));
    assert_eq!(
        deepseek_messages(&messages, &tools, DeepSeekV31, false).len(),
        3
    );
}
