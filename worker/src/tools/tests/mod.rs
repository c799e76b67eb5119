//! The tools module against what real models write: detection on excerpts of real templates,
//! the parser on recorded outputs under every chunking, the fallback rewrite.

mod chunking;
mod deepseek;
mod detect;
mod fallback;
mod gemma4;
mod glm;
mod harmony;
mod kimi;
mod mistral_think;
mod phi4;
mod pythonic;
mod recorded;

use serde_json::Value;

use super::*;

/// The markers that never reach content unless a call was malformed.
const MARKERS: [&str; 18] = [
    "<tool_call",
    "<think",
    "</think",
    "[TOOL_CALLS]",
    "<function=",
    "<|python_tag|>",
    "<|tool_call|>",
    "<arg_key>",
    "<|channel|>",
    "<|message|>",
    "<|tool_call>",
    "<|channel>",
    "<|tool_call_start|>",
    "<｜tool▁calls▁begin｜>",
    "<|tool_calls_section_begin|>",
    "functools[",
    "[THINK]",
    "[/THINK]",
];

fn config(format: ToolFormat, reasoning: ReasoningStart, tools: &[Value]) -> ParserConfig<'_> {
    ParserConfig {
        format,
        parse_tools: true,
        reasoning,
        tools,
    }
}

fn call(name: &str, arguments: &str) -> Fragment {
    Fragment::ToolCall(ToolCall {
        name: name.into(),
        arguments: arguments.into(),
    })
}

fn content(text: &str) -> Fragment {
    Fragment::Content(text.into())
}

fn reasoning(text: &str) -> Fragment {
    Fragment::Reasoning(text.into())
}

/// Feeds `chunks`, then finishes; adjacent text of one kind is merged across pushes.
fn feed<'a>(
    config: ParserConfig<'_>,
    chunks: impl IntoIterator<Item = &'a str>,
) -> (Vec<Fragment>, Option<String>) {
    let mut parser = OutputParser::new(config);
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(parser.push(chunk));
    }
    out.extend(parser.finish());
    (merge(out), parser.malformed().map(str::to_owned))
}

fn merge(fragments: Vec<Fragment>) -> Vec<Fragment> {
    let mut merged: Vec<Fragment> = Vec::new();
    for fragment in fragments {
        match (merged.last_mut(), fragment) {
            (Some(Fragment::Content(last)), Fragment::Content(text))
            | (Some(Fragment::Reasoning(last)), Fragment::Reasoning(text)) => last.push_str(&text),
            (_, fragment) => merged.push(fragment),
        }
    }
    merged
}

/// The fragments of `output` in one push, after checking that every cut into two chunks and
/// a character-by-character feed give the same ones.
fn parse(config: ParserConfig<'_>, output: &str) -> (Vec<Fragment>, Option<String>) {
    let whole = feed(config, [output]);
    for (cut, _) in output.char_indices().skip(1) {
        let split = feed(config, [&output[..cut], &output[cut..]]);
        assert_eq!(split, whole, "cut at {cut}: {:?}", &output[..cut]);
    }
    let mut chars = [0; 4];
    let by_char: Vec<String> = output
        .chars()
        .map(|c| c.encode_utf8(&mut chars).to_owned())
        .collect();
    assert_eq!(
        feed(config, by_char.iter().map(String::as_str)),
        whole,
        "char by char"
    );
    whole
}

/// `parse`, for an output with no malformed call: no marker leaks into content.
fn parse_clean(config: ParserConfig<'_>, output: &str) -> Vec<Fragment> {
    let (fragments, malformed) = parse(config, output);
    assert_eq!(malformed, None);
    assert_no_markers(&fragments);
    fragments
}

fn assert_no_markers(fragments: &[Fragment]) {
    for fragment in fragments {
        if let Fragment::Content(text) = fragment {
            for marker in MARKERS {
                assert!(!text.contains(marker), "{marker} in content {text:?}");
            }
        }
    }
}
