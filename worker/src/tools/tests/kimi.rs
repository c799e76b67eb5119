//! Kimi K2's calls as its templates spell them, each checked whole, at every cut and char by
//! char; the templates' detection.

use super::detect::{id, shipped_template, tokenizer};
use super::*;

use ReasoningStart::{Maybe, Off};
use ToolFormat::Kimi;

const SECTION_BEGIN: &str = "<|tool_calls_section_begin|>";
const SECTION_END: &str = "<|tool_calls_section_end|>";
const CALL_BEGIN: &str = "<|tool_call_begin|>";
const ARGUMENT_BEGIN: &str = "<|tool_call_argument_begin|>";
const CALL_END: &str = "<|tool_call_end|>";

fn kimi_call(id: &str, arguments: &str) -> String {
    format!("{CALL_BEGIN}{id}{ARGUMENT_BEGIN}{arguments}{CALL_END}")
}

#[test]
fn thinking_then_calls_named_by_their_ids() {
    let output = format!(
        "<think>Weather, then time.</think>Checking.{SECTION_BEGIN}{} {}{SECTION_END}",
        kimi_call(
            "functions.get_weather:0",
            r#"{"city": "Paris, \"FR\"", "days": 3}"#
        ),
        kimi_call("functions.now:12", "{}"),
    );
    assert_eq!(
        parse_clean(config(Kimi, Maybe, &[]), &output),
        [
            reasoning("Weather, then time."),
            content("Checking."),
            call("get_weather", r#"{"city":"Paris, \"FR\"","days":3}"#),
            call("now", "{}"),
        ]
    );
}

#[test]
fn ids_without_their_prefix_or_index_still_name_the_function() {
    for id in ["get_weather", "functions.get_weather", "get_weather:3"] {
        let output = format!("{SECTION_BEGIN}{}{SECTION_END}", kimi_call(id, "{}"));
        assert_eq!(
            parse_clean(config(Kimi, Off, &[]), &output),
            [call("get_weather", "{}")],
            "{id}"
        );
    }
    let output = format!("{SECTION_BEGIN}{}", kimi_call("functions.now:0", "{}"));
    assert_eq!(
        parse_clean(config(Kimi, Off, &[]), &output),
        [call("now", "{}")]
    );
}

#[test]
fn a_section_that_is_not_calls_stays_text() {
    for output in [
        format!("{SECTION_BEGIN}{SECTION_END}"),
        format!("{SECTION_BEGIN}{CALL_BEGIN}functions.now:0{{}}{CALL_END}{SECTION_END}"),
        format!(
            "{SECTION_BEGIN}{}{SECTION_END}",
            kimi_call("functions.now:0", "[1]")
        ),
        format!("{SECTION_BEGIN}{}{SECTION_END}", kimi_call(":0", "{}")),
        format!("{SECTION_BEGIN}text{SECTION_END}"),
    ] {
        let (fragments, malformed) = parse(config(Kimi, Off, &[]), &output);
        assert_eq!(fragments, [content(&output)], "{output}");
        assert!(malformed.is_some(), "{output}");
    }
}

#[test]
fn both_k2_templates_are_kimi_with_their_markers_kept() {
    let markers = [
        SECTION_BEGIN,
        SECTION_END,
        CALL_BEGIN,
        ARGUMENT_BEGIN,
        CALL_END,
    ];
    let vocab = tokenizer(&markers.map(|marker| (marker, true)));
    let mut kept = markers.map(|marker| id(&vocab, marker));
    kept.sort_unstable();
    // The first K2 template writes no past calls: its vocabulary tells.
    for (file, reasoning) in [("kimi-k2.jinja", false), ("kimi-k2-thinking.jinja", true)] {
        let formats = ModelFormats::detect(Some(&shipped_template(file)), &vocab);
        assert_eq!(
            formats,
            ModelFormats {
                tool_format: Kimi,
                native_tools: true,
                reasoning,
                kept_tokens: kept.to_vec(),
            },
            "{file}"
        );
    }
    let thinking = ModelFormats::detect(
        Some(&shipped_template("kimi-k2-thinking.jinja")),
        &tokenizer(&[]),
    );
    assert_eq!(thinking.tool_format, Kimi);
}

/// Kimi K2-Thinking may open its calls without closing its thinking: the section ends it.
#[test]
fn a_call_section_ends_the_thinking_it_opens_in() {
    let output = format!(
        "<think>Weather first.{SECTION_BEGIN}{}{SECTION_END}",
        kimi_call("functions.get_weather:0", r#"{"city": "Paris"}"#)
    );
    assert_eq!(
        parse_clean(config(Kimi, Maybe, &[]), &output),
        [
            reasoning("Weather first."),
            call("get_weather", r#"{"city":"Paris"}"#)
        ]
    );
    let without_tools = ParserConfig {
        parse_tools: false,
        ..config(Kimi, Maybe, &[])
    };
    let (fragments, _) = parse(without_tools, &output);
    assert_eq!(
        fragments,
        [reasoning(&output["<think>".len()..])],
        "without tools the section is thinking"
    );
}
