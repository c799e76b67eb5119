//! Random outputs under random chunkings: the fragments never depend on where the text was cut.
//! A seeded generator (xorshift) keeps every run identical, so a failure replays.

use super::*;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Text that comes close to every marker without being one.
const TEXT: &[&str] = &[
    "Hello",
    " ",
    "\n",
    "<",
    "<tool",
    "a < b",
    "[TOOL",
    "[",
    "<|python",
    "<|tool",
    "<function",
    "</think",
    "日本語 🦀",
    "{\"a\": 1}",
    "</tool_call>",
    "<response>",
    "</resp",
    "</response>",
    "<|channel",
    "<channel|",
    "<|\"|>",
    "<|tool_call_",
    "<｜tool▁calls",
    "<｜",
    "<|tool_calls_section",
    "functools",
    "[THINK",
    "[/TH",
];

const THOUGHTS: &[&str] = &["\n", "hmm", " <", "</thin", "<tool_call>", "é"];

fn calls(format: ToolFormat) -> &'static [&'static str] {
    match format {
        ToolFormat::Hermes => &[
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"日\"}}\n</tool_call>",
            "<tool_call>{\"name\": \"g\"}</tool_call>",
            "<tool_call>{\"name\": \"bad\"</tool_call>",
        ],
        ToolFormat::QwenXml => &[
            "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>",
            "<function=g>\n<parameter=s>\n<b>\n</parameter>\n</function>",
            "<tool_call>\n<function=>\n</function>\n</tool_call>",
        ],
        // Llama, Mistral and Granite calls run to the end of the output: one, last.
        ToolFormat::Llama3Json => &["<|python_tag|>{\"name\": \"f\", \"parameters\": {}}"],
        ToolFormat::Mistral | ToolFormat::MistralArgs | ToolFormat::MistralThink => &[
            "[TOOL_CALLS]f[ARGS]{\"x\": [1]}",
            "[TOOL_CALLS][{\"name\": \"g\", \"arguments\": {}}]",
        ],
        ToolFormat::Granite => &[
            "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"x\": \"日\"}}]",
            "<|tool_call|>[{\"name\": \"bad\"",
        ],
        ToolFormat::Phi4Mini => &[
            "functools[{\"name\": \"f\", \"arguments\": {\"x\": \"日\"}}, {\"name\": \"g\"}]",
            "<|tool_call|>{\"name\": \"g\", \"arguments\": {}}<|/tool_call|>",
            "functools[{\"name\": \"bad\"",
        ],
        ToolFormat::Glm => &[
            "<tool_call>f\n<arg_key>x</arg_key>\n<arg_value>日</arg_value>\n</tool_call>",
            "<tool_call>g\n</tool_call>",
            "<tool_call>bad\n<arg_value>1</arg_value></tool_call>",
        ],
        ToolFormat::Gemma4 => &[
            "<|tool_call>call:f{x:<|\"|>日<|\"|>,n:[1,{y:true}]}<tool_call|>",
            "<|tool_call>call:g{}<tool_call|>",
            "<|tool_call>call:bad{x:<tool_call|>",
        ],
        ToolFormat::Pythonic => &[
            "<|tool_call_start|>[f(x='日', n=[1, {\"y\": true}]), g()]<|tool_call_end|>",
            "<|tool_call_start|>[g()]<|tool_call_end|>",
            "<|tool_call_start|>[bad(<|tool_call_end|>",
        ],
        // Llama 4's calls are the whole answer: one list, first.
        ToolFormat::Llama4Pythonic => &[
            "[f(x=\"日\", n=[1, {\"y\": true}]), g()]",
            "<|python_start|>[g()]<|python_end|>",
            "[bad(",
        ],
        ToolFormat::Harmony => &[
            "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\": \"日\"}<|call|>",
            "<|start|>assistant<|channel|>analysis<|message|>hm <|end|>",
            "<|start|>assistant to=functions.g<|channel|>commentary json<|message|>{bad<|call|>",
            "<|start|>assistant<|channel|>final<|message|>ok<|return|>",
        ],
        ToolFormat::DeepSeekV31 | ToolFormat::DeepSeekV3 => &[
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"x\": \"日\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>bad{<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        ],
        ToolFormat::Kimi => &[
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"x\": \"日\"}<|tool_call_end|><|tool_calls_section_end|>",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.g:1<|tool_call_argument_begin|>{}<|tool_call_end|> <|tool_call_begin|>h<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
            "<|tool_calls_section_begin|><|tool_call_begin|>bad<|tool_calls_section_end|>",
        ],
    }
}

fn random_output(rng: &mut Rng, format: ToolFormat, reasoning: ReasoningStart) -> String {
    let mut output = String::new();
    if reasoning != ReasoningStart::Off && rng.below(2) == 0 {
        let (open, close) = format.thinking_markers();
        if reasoning == ReasoningStart::Maybe {
            output.push_str(rng.pick(&["", " ", "\n"]));
            output.push_str(open);
        }
        for _ in 0..rng.below(4) {
            output.push_str(rng.pick(THOUGHTS));
        }
        output.push_str(close);
    }
    let at_end = matches!(
        format,
        ToolFormat::Llama3Json
            | ToolFormat::Mistral
            | ToolFormat::MistralArgs
            | ToolFormat::MistralThink
            | ToolFormat::Granite
            | ToolFormat::Phi4Mini
    );
    let at_start = format == ToolFormat::Llama4Pythonic;
    if at_start && rng.below(2) == 0 {
        output.push_str(rng.pick(calls(format)));
    }
    for _ in 0..rng.below(6) {
        if !at_end && !at_start && rng.below(3) == 0 {
            output.push_str(rng.pick(calls(format)));
        } else {
            output.push_str(rng.pick(TEXT));
        }
    }
    if at_end && rng.below(2) == 0 {
        output.push_str(rng.pick(calls(format)));
    }
    output
}

/// Cuts `text` at random character boundaries into 1 to 8 chunks.
fn random_chunks<'t>(rng: &mut Rng, text: &'t str) -> Vec<&'t str> {
    let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let mut cuts: Vec<usize> = (0..rng.below(8))
        .filter_map(|_| boundaries.get(rng.below(boundaries.len().max(1))).copied())
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut chunks = Vec::new();
    let mut from = 0;
    for cut in cuts.into_iter().chain([text.len()]) {
        chunks.push(&text[from..cut]);
        from = cut;
    }
    chunks
}

#[test]
fn random_chunkings_give_the_fragments_of_one_push() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let formats = [
        ToolFormat::Hermes,
        ToolFormat::QwenXml,
        ToolFormat::Llama3Json,
        ToolFormat::Mistral,
        ToolFormat::Granite,
        ToolFormat::Glm,
        ToolFormat::Harmony,
        ToolFormat::Gemma4,
        ToolFormat::Pythonic,
        ToolFormat::DeepSeekV31,
        ToolFormat::DeepSeekV3,
        ToolFormat::Kimi,
        ToolFormat::Llama4Pythonic,
        ToolFormat::MistralArgs,
        ToolFormat::MistralThink,
        ToolFormat::Phi4Mini,
    ];
    let starts = [
        ReasoningStart::Off,
        ReasoningStart::Maybe,
        ReasoningStart::Inside,
    ];
    for round in 0..3000 {
        let format = formats[round % formats.len()];
        let reasoning = starts[rng.below(starts.len())];
        // Harmony reasons on its own channel, never in `<think>`.
        let reasoning = if format == ToolFormat::Harmony {
            ReasoningStart::Off
        } else {
            reasoning
        };
        let output = random_output(&mut rng, format, reasoning);
        let parser_config = config(format, reasoning, &[]);
        let whole = feed(parser_config, [output.as_str()]);
        if whole.1.is_none() {
            assert_no_openers(&whole.0, &output);
        }
        for _ in 0..4 {
            let chunks = random_chunks(&mut rng, &output);
            assert_eq!(
                feed(parser_config, chunks.iter().copied()),
                whole,
                "{format:?} {reasoning:?} {chunks:?}"
            );
        }
    }
}

/// Random text can hold `</think` and `</tool_call>`, but only a malformed call puts an opening
/// marker into content.
fn assert_no_openers(fragments: &[Fragment], output: &str) {
    let openers = [
        "<tool_call>",
        "<function=",
        "[TOOL_CALLS]",
        "<|python_tag|>",
        "<think>",
        "<|tool_call>",
        "<|tool_call_start|>",
        "<｜tool▁calls▁begin｜>",
        "<|tool_calls_section_begin|>",
    ];
    for fragment in fragments {
        if let Fragment::Content(text) = fragment {
            for marker in openers {
                assert!(
                    !text.contains(marker),
                    "{marker} in {text:?} from {output:?}"
                );
            }
        }
    }
}

/// Marker pieces in any order: whatever the model writes, no panic, chunking does not matter,
/// and without reasoning or a valid call the content is the output, byte for byte.
#[test]
fn marker_soup_never_panics_and_keeps_every_byte() {
    const SOUP: &[&str] = &[
        "<",
        ">",
        "{",
        "}",
        "[",
        "]",
        ";",
        " ",
        "\n",
        "é",
        "\"name\"",
        ":",
        "\"f\"",
        "<tool_call>",
        "</tool_call>",
        "<function=",
        "</function>",
        "<parameter=",
        "</parameter>",
        "<think>",
        "</think>",
        "[TOOL_CALLS]",
        "[ARGS]",
        "[CALL_ID]",
        "<|python_tag|>",
        "<|tool_call|>",
        "\"arguments\"",
        "<arg_key>",
        "</arg_value>",
        "<|start|>",
        "<|channel|>",
        " to=functions.f",
        "<|message|>",
        "<|end|>",
        "<|call|>",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
        "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_calls_section_end|>",
        "functools[",
        "<|/tool_call|>",
        "[THINK]",
        "[/THINK]",
    ];
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let formats = [
        ToolFormat::Hermes,
        ToolFormat::QwenXml,
        ToolFormat::Llama3Json,
        ToolFormat::Mistral,
        ToolFormat::Granite,
        ToolFormat::Glm,
        ToolFormat::Harmony,
        ToolFormat::Gemma4,
        ToolFormat::Pythonic,
        ToolFormat::DeepSeekV31,
        ToolFormat::DeepSeekV3,
        ToolFormat::Kimi,
        ToolFormat::Llama4Pythonic,
        ToolFormat::MistralArgs,
        ToolFormat::MistralThink,
        ToolFormat::Phi4Mini,
    ];
    let starts = [
        ReasoningStart::Off,
        ReasoningStart::Maybe,
        ReasoningStart::Inside,
    ];
    for round in 0..3000 {
        let output: String = (0..rng.below(24)).map(|_| rng.pick(SOUP)).collect();
        let parser_config = ParserConfig {
            parse_tools: rng.below(4) != 0,
            ..config(formats[round % formats.len()], starts[rng.below(3)], &[])
        };
        let whole = feed(parser_config, [output.as_str()]);
        let chunks = random_chunks(&mut rng, &output);
        assert_eq!(
            feed(parser_config, chunks.iter().copied()),
            whole,
            "{chunks:?}"
        );
        let called = whole.0.iter().any(|f| matches!(f, Fragment::ToolCall(_)));
        // Harmony's markers frame messages, so they never reach the content.
        let harmony = parser_config.format == ToolFormat::Harmony;
        if parser_config.reasoning == ReasoningStart::Off && !called && !harmony {
            let text: String = whole
                .0
                .iter()
                .filter_map(|f| match f {
                    Fragment::Content(text) => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(text, output, "{parser_config:?}");
        }
    }
}
