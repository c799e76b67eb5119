//! Magistral's and Ministral 3 Reasoning's `[THINK]` blocks, checked whole, at every cut and
//! char by char, before an answer and before calls; their templates' detection.

use super::detect::{id, tokenizer};
use super::*;

use ReasoningStart::Maybe;
use ToolFormat::MistralThink;

/// The lines of Ministral-3-3B-Reasoning-2512's `chat_template.jinja` that write a past
/// assistant turn's thinking and calls, and its tools.
const MINISTRAL3_REASONING: &str = r#"{%- set tools_definition = '[AVAILABLE_TOOLS]' + (tools| tojson) + '[/AVAILABLE_TOOLS]' %}
            {%- for block in message['content'] %}
                {%- if block['type'] == 'text' %}
                    {{- block['text'] }}
                {%- elif block['type'] == 'thinking' %}
                    {{- '[THINK]' + block['thinking'] + '[/THINK]' }}
                {%- else %}
            {%- for tool in message['tool_calls'] %}
                {{- '[TOOL_CALLS]' }}
                {%- set name = tool['function']['name'] %}
                {{- name + '[ARGS]' + arguments }}
            {%- endfor %}"#;

#[test]
fn a_think_block_is_reasoning_and_what_follows_the_answer() {
    let output = "[THINK]The capital: Paris.\n[/THINK]The capital of France is Paris.";
    assert_eq!(
        parse_clean(config(MistralThink, Maybe, &[]), output),
        [
            reasoning("The capital: Paris.\n"),
            content("The capital of France is Paris."),
        ]
    );
    // Without the block, all of it is the answer, `<think>` included (not its notation).
    let plain = "<think>x</think> Paris.";
    assert_eq!(
        feed(config(MistralThink, Maybe, &[]), [plain]).0,
        [content(plain)]
    );
}

#[test]
fn calls_after_the_thinking_are_calls() {
    let output = "[THINK]Weather, then time.[/THINK][TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]now[ARGS]{}";
    assert_eq!(
        parse_clean(config(MistralThink, Maybe, &[]), output),
        [
            reasoning("Weather, then time."),
            call("get_weather", r#"{"city":"Paris"}"#),
            call("now", "{}"),
        ]
    );
}

#[test]
fn unfinished_thinking_stays_reasoning() {
    let output = "[THINK]Still thinking [/TH";
    assert_eq!(
        parse_clean(config(MistralThink, Maybe, &[]), output),
        [reasoning("Still thinking [/TH")]
    );
}

/// A Mistral template that writes `[THINK]` is Magistral's notation: reasoning, its `[ARGS]`
/// calls, and both thinking tokens kept through decoding with the call tokens.
#[test]
fn a_mistral_template_writing_think_thinks_in_think_tokens() {
    let tokens = ["[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]"];
    let vocab = tokenizer(&tokens.map(|token| (token, true)));
    let mut kept = tokens.map(|token| id(&vocab, token)).to_vec();
    kept.sort_unstable();
    assert_eq!(
        ModelFormats::detect(Some(MINISTRAL3_REASONING), &vocab),
        ModelFormats {
            tool_format: MistralThink,
            native_tools: true,
            reasoning: true,
            kept_tokens: kept,
        }
    );
}
