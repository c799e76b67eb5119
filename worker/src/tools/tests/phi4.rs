//! Phi-4-mini's calls in both notations it is seen writing, each checked whole, at every cut
//! and char by char; its templates' detection.

use super::detect::{id, shipped_template, tokenizer};
use super::*;

use ReasoningStart::Off;
use ToolFormat::Phi4Mini;

const TOOL_CALL: &str = "<|tool_call|>";
const TOOL_CALL_END: &str = "<|/tool_call|>";

#[test]
fn a_functools_list_is_its_calls() {
    let output = r#"Checking both.functools[{"name": "get_weather", "arguments": {"city": "Paris, \"FR\"", "days": 3}}, {"name": "now", "arguments": {}}]"#;
    assert_eq!(
        parse_clean(config(Phi4Mini, Off, &[]), output),
        [
            content("Checking both."),
            call("get_weather", r#"{"city":"Paris, \"FR\"","days":3}"#),
            call("now", "{}"),
        ]
    );
    let bare = r#"functools[{"name": "now"}]"#;
    assert_eq!(
        parse_clean(config(Phi4Mini, Off, &[]), bare),
        [call("now", "{}")]
    );
}

#[test]
fn its_tool_call_tokens_hold_a_call_or_a_list() {
    let weather = r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#;
    let now = r#"[{"name": "now", "parameters": {}}]"#;
    for output in [
        format!("{TOOL_CALL}{weather}{TOOL_CALL_END}{TOOL_CALL}{now}{TOOL_CALL_END}"),
        format!("{TOOL_CALL}{weather}{TOOL_CALL_END}\n{TOOL_CALL}{now}"),
        // The output may stop partway through the closing token spelled out.
        format!("{TOOL_CALL}{weather}{TOOL_CALL_END}{TOOL_CALL}{now}<|/tool"),
        format!("{TOOL_CALL}{weather}\nfunctools[{}", &now[1..]),
    ] {
        assert_eq!(
            parse_clean(config(Phi4Mini, Off, &[]), &output),
            [
                call("get_weather", r#"{"city":"Paris"}"#),
                call("now", "{}")
            ],
            "{output}"
        );
    }
}

#[test]
fn what_is_not_a_call_stays_text() {
    for output in [
        "functools[1, 2]",
        "functools[]",
        r#"functools[{"name": "now"}"#,
        r#"functools[{"arguments": {}}]"#,
        "<|tool_call|>now()<|/tool_call|>",
    ] {
        let (fragments, malformed) = parse(config(Phi4Mini, Off, &[]), output);
        assert_eq!(fragments, [content(output)], "{output}");
        assert!(malformed.is_some(), "{output}");
    }
    // Python's module is prose: only `functools[` opens a call.
    let prose = "Use functools.reduce, or functools [sic].";
    assert_eq!(
        parse_clean(config(Phi4Mini, Off, &[]), prose),
        [content(prose)]
    );
}

#[test]
fn text_after_the_calls_is_content() {
    let output = r#"functools[{"name": "now", "arguments": {}}] Then I will answer."#;
    let (fragments, malformed) = parse(config(Phi4Mini, Off, &[]), output);
    assert_eq!(
        fragments,
        [call("now", "{}"), content("Then I will answer.")]
    );
    assert!(malformed.is_some());
}

/// The released template takes the tools only as a system message's `tools` string; llama.cpp's
/// rewrite renders `tools` itself and asks for `<|tool_call|>`. Both are Phi-4-mini's format,
/// with its call tokens kept through decoding.
#[test]
fn both_phi4_mini_templates_are_its_format_with_its_tokens_kept() {
    let vocab = tokenizer(&[
        ("<|tool|>", true),
        ("<|/tool|>", true),
        (TOOL_CALL, true),
        (TOOL_CALL_END, true),
    ]);
    let mut kept = vec![id(&vocab, TOOL_CALL), id(&vocab, TOOL_CALL_END)];
    kept.sort_unstable();
    let released = ModelFormats::detect(Some(&shipped_template("phi4-mini.jinja")), &vocab);
    assert_eq!(
        released,
        ModelFormats {
            tool_format: Phi4Mini,
            native_tools: false,
            reasoning: false,
            kept_tokens: kept.clone(),
        }
    );
    let rewrite = r#"{%- if tools is defined -%}{% for tool in tools %}{{- '<|tool|>' + (tool['function'] | tojson) + '<|/tool|>' -}}{% endfor %}{{- 'To use a tool, respond in this format: <|tool_call|>{"name": "foo", "arguments": {"a": 1}}<|/tool_call|>' -}}{%- endif -%}"#;
    let rewritten = ModelFormats::detect(Some(rewrite), &vocab);
    assert_eq!(
        (rewritten.tool_format, rewritten.native_tools),
        (Phi4Mini, true)
    );
}

/// The tools go into the first system message as the template's `tools` string (the functions
/// as `json.dumps` writes them), a system message is added when there is none, and past calls
/// become the assistant's `functools[` text.
#[test]
fn phi4_messages_put_the_functions_in_the_system_message_and_calls_in_text() {
    let tools = [
        serde_json::json!({"type": "function", "function": {"name": "now",
        "description": "The time", "parameters": {"type": "object"}}}),
    ];
    let listed =
        r#"[{"name": "now", "description": "The time", "parameters": {"type": "object"}}]"#;
    let conversation = [
        serde_json::json!({"role": "user", "content": "Time?"}),
        serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "now", "arguments": "{\"tz\": \"UTC\"}"}}]}),
        serde_json::json!({"role": "tool", "tool_call_id": "call_1", "content": "noon"}),
    ];
    let messages = phi4_messages(&conversation, &tools);
    assert_eq!(
        messages,
        [
            serde_json::json!({"role": "system",
                "content": "You are a helpful assistant with some tools.", "tools": listed}),
            conversation[0].clone(),
            serde_json::json!({"role": "assistant",
                "content": r#"functools[{"name": "now", "arguments": {"tz": "UTC"}}]"#}),
            conversation[2].clone(),
        ]
    );
    let with_system = [serde_json::json!({"role": "system", "content": "Be brief."})];
    assert_eq!(
        phi4_messages(&with_system, &tools),
        [serde_json::json!({"role": "system", "content": "Be brief.", "tools": listed})]
    );
}
