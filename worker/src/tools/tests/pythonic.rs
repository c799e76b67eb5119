//! LFM2's Python-style calls as its template spells them, each checked whole, at every cut and
//! char by char.

use super::*;

use ReasoningStart::{Maybe, Off};
use ToolFormat::Pythonic;

#[test]
fn thinking_then_a_list_of_calls_with_python_literals() {
    let output = "<think>Weather, then time.</think><|tool_call_start|>[get_weather(city='Paris, \\'FR\\'', \
                  days=3, metric=True, tags=[\"a\", 'b'], where={\"lat\": 48.8, \"x\": null}), now()]<|tool_call_end|>";
    assert_eq!(
        parse_clean(config(Pythonic, Maybe, &[]), output),
        [
            reasoning("Weather, then time."),
            call(
                "get_weather",
                r#"{"city":"Paris, 'FR'","days":3,"metric":true,"tags":["a","b"],"where":{"lat":48.8,"x":null}}"#
            ),
            call("now", "{}"),
        ]
    );
}

#[test]
fn text_around_a_call_stays_content() {
    let output = "Let me check.<|tool_call_start|>[f(x=\"a\\nb\")]<|tool_call_end|>Done.";
    assert_eq!(
        parse_clean(config(Pythonic, Off, &[]), output),
        [
            content("Let me check."),
            call("f", r#"{"x":"a\nb"}"#),
            content("Done.")
        ]
    );
}

#[test]
fn a_list_that_is_not_python_calls_stays_text() {
    for output in [
        "<|tool_call_start|>f(x=1)<|tool_call_end|>",
        "<|tool_call_start|>[f(x=)]<|tool_call_end|>",
        "<|tool_call_start|>[f(1)]<|tool_call_end|>",
        "<|tool_call_start|>[f(x='open)]<|tool_call_end|>",
        "<|tool_call_start|>[]<|tool_call_end|>",
    ] {
        let (fragments, malformed) = parse(config(Pythonic, Off, &[]), output);
        assert_eq!(fragments, [content(output)], "{output}");
        assert!(malformed.is_some(), "{output}");
    }
}
