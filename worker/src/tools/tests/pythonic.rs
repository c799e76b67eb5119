//! LFM2's and Llama 4's Python-style calls as their templates spell them, each checked whole,
//! at every cut and char by char.

use super::*;

use ReasoningStart::{Maybe, Off};
use ToolFormat::{Llama4Pythonic, Pythonic};

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

#[test]
fn llama4_answers_with_a_bare_list_of_calls() {
    let output = "[get_weather(city=\"Paris\", days=3), now()]";
    assert_eq!(
        parse_clean(config(Llama4Pythonic, Off, &[]), output),
        [
            call("get_weather", r#"{"city":"Paris","days":3}"#),
            call("now", "{}")
        ]
    );
}

/// vLLM's `llama4_pythonic` reads the list inside the tokens Llama 4 sometimes wraps it in.
#[test]
fn llama4_may_wrap_its_calls_in_python_tokens() {
    let output = " <|python_start|>[f(x='a b', flags=[True, None])]<|python_end|>\n";
    assert_eq!(
        parse_clean(config(Llama4Pythonic, Off, &[]), output),
        [call("f", r#"{"x":"a b","flags":[true,null]}"#)]
    );
}

/// Only an answer that opens with a list is a call; a list later on is what the model says.
#[test]
fn llama4_text_then_a_list_stays_text() {
    let output = "Sure: [f(x=1)]";
    assert_eq!(
        parse_clean(config(Llama4Pythonic, Off, &[]), output),
        [content(output)]
    );
}

#[test]
fn llama4_an_answer_that_is_not_only_calls_stays_text() {
    for output in [
        "[1, 2, 3]",
        "[f(x=1)] and more",
        "[f(x=1)",
        "<|python_start|>print(1)<|python_end|>",
    ] {
        let (fragments, malformed) = parse(config(Llama4Pythonic, Off, &[]), output);
        assert_eq!(fragments, [content(output)], "{output}");
        assert!(malformed.is_some(), "{output}");
    }
}

/// Without tools in the request, a list is the answer's text.
#[test]
fn llama4_without_tools_a_list_is_text() {
    let output = "[f(x=1)]";
    let config = ParserConfig {
        parse_tools: false,
        ..config(Llama4Pythonic, Off, &[])
    };
    assert_eq!(parse_clean(config, output), [content(output)]);
}
