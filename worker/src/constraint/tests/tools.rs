//! Tool calls: each format's exact shape, arguments valid for the named tool's parameters.

use serde::de::IgnoredAny;
use serde_json::{Map, Value, json};
use tokenizers::AddedToken;

use super::schema::{check, check_compact};
use super::{Model, SEEDS, fixture, fixture_tokenizer, generate, sentencepiece};
use crate::constraint::{Constraint, GrammarSpec, ToolCallChoice};
use crate::tools::{Fragment, OutputParser, ParserConfig, ReasoningStart, ToolFormat};

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 10},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city", "days"],
                "additionalProperties": false,
            },
        }}),
        json!({"type": "function", "function": {
            "name": "list_files",
            "parameters": {
                "type": "object",
                "properties": {
                    "recursive": {"type": "boolean"},
                    "depth": {"type": "integer", "minimum": 0, "maximum": 3},
                },
                "required": ["recursive"],
                "additionalProperties": false,
            },
        }}),
        json!({"type": "function", "function": {
            "name": "now",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": false},
        }}),
    ]
}

fn spec(format: ToolFormat, choice: ToolCallChoice, parallel: bool) -> GrammarSpec {
    GrammarSpec::ToolCalls {
        format,
        tools: tools(),
        choice,
        parallel,
    }
}

fn parameters(name: &str) -> Value {
    tools()
        .into_iter()
        .find(|tool| tool["function"]["name"] == name)
        .map(|tool| tool["function"]["parameters"].clone())
        .unwrap_or_else(|| panic!("no tool {name}"))
}

/// A call object `{"name": NAME, ARGUMENTS_KEY: ARGS}`, keys in that order; checks ARGS against
/// the tool's parameters and returns the name.
fn check_call(call: &Value, arguments_key: &str) -> String {
    let object = call.as_object().unwrap();
    let keys: Vec<&str> = object.keys().map(String::as_str).collect();
    assert_eq!(keys, ["name", arguments_key], "{call}");
    let name = object["name"].as_str().unwrap().to_owned();
    check(&object[arguments_key], &parameters(&name));
    name
}

/// Hermes output as its calls, checked; returns the names called.
fn hermes_calls(text: &str) -> Vec<String> {
    // JSON holds no raw newline, so `\n</tool_call>` only ever closes a call.
    let mut names = Vec::new();
    let mut rest = text;
    loop {
        let body = rest
            .strip_prefix("<tool_call>\n")
            .unwrap_or_else(|| panic!("{text}"));
        let (json, after) = body
            .split_once("\n</tool_call>")
            .unwrap_or_else(|| panic!("{text}"));
        assert!(json.starts_with("{\"name\": \""), "{text}");
        check_compact(json);
        names.push(check_call(
            &serde_json::from_str(json).unwrap(),
            "arguments",
        ));
        match after.strip_prefix('\n') {
            Some(next) => rest = next,
            None => {
                assert_eq!(after, "", "{text}");
                return names;
            }
        }
    }
}

#[test]
fn hermes_calls_have_their_exact_shape() {
    for model in [fixture(), sentencepiece()] {
        let mut several = false;
        for seed in 0..SEEDS {
            let one = generate(
                &model,
                &spec(ToolFormat::Hermes, ToolCallChoice::Required, false),
                seed,
            );
            assert_eq!(hermes_calls(&one.text).len(), 1);
            let any = generate(
                &model,
                &spec(ToolFormat::Hermes, ToolCallChoice::Required, true),
                seed,
            );
            several |= hermes_calls(&any.text).len() > 1;
        }
        assert!(several, "parallel calls never made more than one call");
    }
}

#[test]
fn a_named_tool_is_the_one_called() {
    let model = fixture();
    for format in [
        ToolFormat::Hermes,
        ToolFormat::Llama3Json,
        ToolFormat::QwenXml,
    ] {
        for seed in 0..SEEDS {
            let choice = ToolCallChoice::Named("list_files".into());
            let output = generate(&model, &spec(format, choice, true), seed);
            let names = match format {
                ToolFormat::Hermes => hermes_calls(&output.text),
                ToolFormat::QwenXml => qwen_calls(&output.text),
                _ => vec![check_call(
                    &serde_json::from_str(&output.text).unwrap(),
                    "parameters",
                )],
            };
            assert!(
                names.iter().all(|name| name == "list_files"),
                "{}",
                output.text
            );
        }
    }
}

#[test]
fn llama3_calls_are_one_json_object() {
    let model = sentencepiece();
    let mut names = Vec::new();
    for seed in 0..SEEDS {
        let output = generate(
            &model,
            &spec(ToolFormat::Llama3Json, ToolCallChoice::Required, true),
            seed,
        );
        assert!(output.text.starts_with("{\"name\": \""), "{}", output.text);
        check_compact(&output.text);
        names.push(check_call(
            &serde_json::from_str(&output.text).unwrap(),
            "parameters",
        ));
    }
    names.dedup();
    assert!(names.len() > 1, "every seed called {names:?}");
}

#[test]
fn mistral_calls_follow_the_tool_calls_token() {
    let model = sentencepiece();
    let marker = model.id("[TOOL_CALLS]");
    for parallel in [false, true] {
        let mut lengths = Vec::new();
        for seed in 0..SEEDS {
            let output = generate(
                &model,
                &spec(ToolFormat::Mistral, ToolCallChoice::Required, parallel),
                seed,
            );
            assert_eq!(output.tokens[0], marker);
            let json = model.tokenizer.decode(&output.tokens[1..], false).unwrap();
            check_compact(&json);
            let calls: Vec<Value> = serde_json::from_str(&json).unwrap();
            for call in &calls {
                check_call(call, "arguments");
            }
            lengths.push(calls.len());
        }
        if parallel {
            assert!(lengths.iter().any(|&n| n > 1));
        } else {
            assert!(lengths.iter().all(|&n| n == 1));
        }
    }
}

#[test]
fn granite_calls_are_a_list_after_its_marker_spelled_out_without_its_token() {
    let model = fixture();
    for seed in 0..SEEDS {
        let output = generate(
            &model,
            &spec(ToolFormat::Granite, ToolCallChoice::Required, true),
            seed,
        );
        let json = output.text.strip_prefix("<|tool_call|>").unwrap();
        check_compact(json);
        let calls: Vec<Value> = serde_json::from_str(json).unwrap();
        for call in &calls {
            check_call(call, "arguments");
        }
    }
}

/// QwenXml output as its calls, checked against the tools; returns the names called.
fn qwen_calls(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    loop {
        let body = rest
            .strip_prefix("<tool_call>\n<function=")
            .unwrap_or_else(|| panic!("{text}"));
        let (name, mut body) = body.split_once(">\n").unwrap();
        let schema = parameters(name);
        let properties = schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut arguments = Map::new();
        while let Some(parameter) = body.strip_prefix("<parameter=") {
            let (key, value) = parameter.split_once(">\n").unwrap();
            // A value holds no `</parameter>`, so the first one closes it.
            let (value, after) = value.split_once("</parameter>\n").unwrap();
            let value = value.strip_suffix('\n').unwrap_or_else(|| panic!("{text}"));
            let value = if properties[key]["type"] == "string" {
                Value::String(value.to_owned())
            } else {
                check_compact(value);
                serde_json::from_str(value).unwrap_or_else(|_| panic!("{value} in {text}"))
            };
            arguments.insert(key.to_owned(), value);
            body = after;
        }
        // Parameters come in schema order.
        let order: Vec<&String> = properties
            .keys()
            .filter(|key| arguments.contains_key(*key))
            .collect();
        assert_eq!(order, arguments.keys().collect::<Vec<_>>(), "{text}");
        check(&Value::Object(arguments), &schema);
        names.push(name.to_owned());
        let after = body
            .strip_prefix("</function>\n</tool_call>")
            .unwrap_or_else(|| panic!("{text}"));
        match after.strip_prefix('\n') {
            Some(next) => rest = next,
            None => {
                assert_eq!(after, "", "{text}");
                return names;
            }
        }
    }
}

#[test]
fn qwen_xml_calls_have_their_exact_shape() {
    for model in [fixture(), sentencepiece()] {
        let mut called = Vec::new();
        for seed in 0..SEEDS {
            let output = generate(
                &model,
                &spec(ToolFormat::QwenXml, ToolCallChoice::Required, true),
                seed,
            );
            called.extend(qwen_calls(&output.text));
        }
        called.sort();
        called.dedup();
        assert_eq!(called, ["get_weather", "list_files", "now"]);
    }
}

#[test]
fn a_tool_without_parameters_takes_any_object() {
    let model = fixture();
    let spec = GrammarSpec::ToolCalls {
        format: ToolFormat::Hermes,
        tools: vec![json!({"type": "function", "function": {"name": "anything"}})],
        choice: ToolCallChoice::Required,
        parallel: false,
    };
    for seed in 0..SEEDS {
        let output = generate(&model, &spec, seed);
        let json = output
            .text
            .strip_prefix("<tool_call>\n{\"name\": \"anything\", \"arguments\": {")
            .and_then(|rest| rest.strip_suffix("}\n</tool_call>"))
            .map(|arguments| format!("{{{arguments}"))
            .unwrap_or_else(|| panic!("{}", output.text));
        // Unbounded numbers may overflow an f64, which `Value` refuses: check the syntax only.
        serde_json::from_str::<IgnoredAny>(&json)
            .unwrap_or_else(|error| panic!("{error} in {json}"));
    }
}

/// Qwen's `<tool_call>` is an added token that is not special: the grammar's literal may be
/// written with it, and llguidance forces it as the tokenizer would write it.
#[test]
fn a_non_special_added_tool_call_token_writes_the_literal() {
    let (tokenizer, _) = fixture_tokenizer();
    let mut tokenizer = tokenizer.clone();
    tokenizer.add_tokens(&[
        AddedToken::from("<tool_call>", false),
        AddedToken::from("</tool_call>", false),
    ]);
    let n_vocab = tokenizer.get_vocab_size(true);
    let eos = [tokenizer.token_to_id("<|im_end|>").unwrap()].into();
    let model = Model::new(tokenizer, n_vocab, eos);
    let open = model.id("<tool_call>");
    let spec = spec(ToolFormat::Hermes, ToolCallChoice::Required, false);
    let mut constraint = Constraint::compile(&model.factory, &spec).unwrap();
    let mut logits = vec![0.0; n_vocab];
    constraint.mask(&mut logits).unwrap();
    assert!(logits[open as usize].is_finite());
    for seed in 0..SEEDS {
        let output = generate(&model, &spec, seed);
        assert_eq!(output.tokens[0], open);
        hermes_calls(&output.text);
    }
}

/// `text` through the output parser of `format`, as the worker reads a forced call: every piece
/// must be a call, each checked against its tool; returns the names called.
fn parsed_calls(format: ToolFormat, text: &str) -> Vec<String> {
    let tools = tools();
    let mut parser = OutputParser::new(ParserConfig {
        format,
        parse_tools: true,
        reasoning: ReasoningStart::Off,
        tools: &tools,
    });
    let mut fragments = parser.push(text);
    fragments.extend(parser.finish());
    assert!(!fragments.is_empty(), "{text}");
    fragments
        .into_iter()
        .map(|fragment| match fragment {
            Fragment::ToolCall(call) => {
                let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
                check(&arguments, &parameters(&call.name));
                call.name
            }
            other => panic!("{other:?} in {text}"),
        })
        .collect()
}

#[test]
fn glm_calls_parse_back_into_valid_calls() {
    let mut called = Vec::new();
    for seed in 0..SEEDS {
        let spec = spec(ToolFormat::Glm, ToolCallChoice::Required, true);
        let output = generate(&fixture(), &spec, seed);
        assert!(output.text.starts_with("<tool_call>"), "{}", output.text);
        called.extend(parsed_calls(ToolFormat::Glm, &output.text));
    }
    called.sort();
    called.dedup();
    assert_eq!(called, ["get_weather", "list_files", "now"]);
}

/// The fixture's vocabulary has no harmony tokens, so their text is written out.
#[test]
fn harmony_calls_are_one_message_to_the_function() {
    for seed in 0..SEEDS {
        let spec = spec(
            ToolFormat::Harmony,
            ToolCallChoice::Named("get_weather".into()),
            false,
        );
        let output = generate(&fixture(), &spec, seed);
        let header = " to=functions.get_weather<|channel|>commentary json<|message|>";
        assert!(output.text.starts_with(header), "{}", output.text);
        check_compact(&output.text[header.len()..]);
        assert_eq!(
            parsed_calls(ToolFormat::Harmony, &output.text),
            ["get_weather"]
        );
    }
}

/// Gemma 4's calls, with its markers and `<|"|>` quote as special tokens (as its vocabulary has
/// them) and spelled out (the fixture's vocabulary lacks them): each parses back into a call
/// valid for its tool.
#[test]
fn gemma4_calls_parse_back_into_valid_calls_with_or_without_its_tokens() {
    let (tokenizer, _) = fixture_tokenizer();
    let mut with_tokens = tokenizer.clone();
    with_tokens.add_special_tokens(&[
        AddedToken::from("<|tool_call>", true),
        AddedToken::from("<tool_call|>", true),
        AddedToken::from("<|\"|>", true),
    ]);
    let n_vocab = with_tokens.get_vocab_size(true);
    let eos = [with_tokens.token_to_id("<|im_end|>").unwrap()].into();
    let quote = with_tokens.token_to_id("<|\"|>").unwrap();
    for (model, quote) in [
        (fixture(), None),
        (Model::new(with_tokens, n_vocab, eos), Some(quote)),
    ] {
        let mut called = Vec::new();
        for seed in 0..SEEDS {
            let spec = spec(ToolFormat::Gemma4, ToolCallChoice::Required, true);
            let output = generate(&model, &spec, seed);
            assert!(
                output.text.starts_with("<|tool_call>call:"),
                "{}",
                output.text
            );
            if let Some(quote) = quote.filter(|_| output.text.contains("<|\"|>")) {
                assert!(output.tokens.contains(&quote), "{:?}", output.tokens);
            }
            called.extend(parsed_calls(ToolFormat::Gemma4, &output.text));
        }
        called.sort();
        called.dedup();
        assert_eq!(called, ["get_weather", "list_files", "now"]);
    }
}

/// LFM2's list of Python calls (its markers spelled out: the fixture's vocabulary lacks them),
/// each parsed back into a call valid for its tool.
#[test]
fn pythonic_calls_parse_back_into_valid_calls() {
    let mut called = Vec::new();
    for seed in 0..SEEDS {
        let spec = spec(ToolFormat::Pythonic, ToolCallChoice::Required, true);
        let output = generate(&fixture(), &spec, seed);
        assert!(
            output.text.starts_with("<|tool_call_start|>["),
            "{}",
            output.text
        );
        called.extend(parsed_calls(ToolFormat::Pythonic, &output.text));
    }
    called.sort();
    called.dedup();
    assert_eq!(called, ["get_weather", "list_files", "now"]);
}

/// The fixture with `markers` added as special tokens, as DeepSeek's and Kimi's vocabularies
/// have their call markers, and the markers' ids.
fn with_special_tokens(markers: &[&str]) -> (Model, Vec<u32>) {
    let (tokenizer, _) = fixture_tokenizer();
    let mut tokenizer = tokenizer.clone();
    let added: Vec<AddedToken> = markers
        .iter()
        .map(|&marker| AddedToken::from(marker, true))
        .collect();
    tokenizer.add_special_tokens(&added);
    let ids = markers
        .iter()
        .map(|&marker| tokenizer.token_to_id(marker).unwrap())
        .collect();
    let n_vocab = tokenizer.get_vocab_size(true);
    let eos = [tokenizer.token_to_id("<|im_end|>").unwrap()].into();
    (Model::new(tokenizer, n_vocab, eos), ids)
}

/// Calls forced in `format` under every seed, with `markers` as special tokens and spelled out:
/// each output starts with the section's marker (by id where it is a token) and parses back
/// into calls valid for their tools, every tool called by some seed. Returns the outputs.
fn sectioned_calls(format: ToolFormat, markers: &[&str]) -> Vec<String> {
    let (with_tokens, ids) = with_special_tokens(markers);
    let mut outputs = Vec::new();
    for (model, open) in [(fixture(), None), (with_tokens, Some(ids[0]))] {
        let mut called = Vec::new();
        for seed in 0..SEEDS {
            let output = generate(&model, &spec(format, ToolCallChoice::Required, true), seed);
            assert!(output.text.starts_with(markers[0]), "{}", output.text);
            if let Some(open) = open {
                assert_eq!(output.tokens[0], open, "{:?}", output.tokens);
            }
            called.extend(parsed_calls(format, &output.text));
            outputs.push(output.text);
        }
        called.sort();
        called.dedup();
        assert_eq!(called, ["get_weather", "list_files", "now"], "{format:?}");
    }
    outputs
}

#[test]
fn deepseek_calls_parse_back_into_valid_calls_in_either_notation() {
    let markers = [
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁calls▁end｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁sep｜>",
    ];
    for output in sectioned_calls(ToolFormat::DeepSeekV31, &markers) {
        let first = output.strip_prefix(markers[0]).unwrap();
        let first = first.strip_prefix(markers[2]).unwrap();
        let (name, arguments) = first.split_once(markers[4]).unwrap();
        assert!(parameters(name).is_object() && arguments.starts_with('{'));
    }
    for output in sectioned_calls(ToolFormat::DeepSeekV3, &markers) {
        let fenced = format!("{}{}function{}", markers[0], markers[2], markers[4]);
        assert!(output.starts_with(&fenced), "{output}");
        assert!(output.contains("\n```json\n{"), "{output}");
    }
}

#[test]
fn kimi_calls_parse_back_into_valid_calls_named_by_their_ids() {
    let markers = [
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
    ];
    for output in sectioned_calls(ToolFormat::Kimi, &markers) {
        let first = output.strip_prefix(markers[0]).unwrap();
        let first = first.strip_prefix(markers[2]).unwrap();
        let (id, _) = first.split_once(markers[3]).unwrap();
        let (name, index) = id
            .strip_prefix("functions.")
            .and_then(|id| id.split_once(':'))
            .unwrap_or_else(|| panic!("{id}"));
        assert!(parameters(name).is_object());
        assert!(index.bytes().all(|b| b.is_ascii_digit()) && !index.is_empty());
    }
}

/// Llama 4's bare list of Python calls, the whole answer, each parsed back into a call valid
/// for its tool.
#[test]
fn llama4_pythonic_calls_parse_back_into_valid_calls() {
    let mut called = Vec::new();
    for seed in 0..SEEDS {
        let spec = spec(ToolFormat::Llama4Pythonic, ToolCallChoice::Required, true);
        let output = generate(&fixture(), &spec, seed);
        assert!(output.text.starts_with('['), "{}", output.text);
        called.extend(parsed_calls(ToolFormat::Llama4Pythonic, &output.text));
    }
    called.sort();
    called.dedup();
    assert_eq!(called, ["get_weather", "list_files", "now"]);
}

/// Mistral's newer notation, each call after its own `[TOOL_CALLS]` token (`[ARGS]` spelled
/// out: the vocabulary lacks it), each parsed back into a call valid for its tool.
#[test]
fn mistral_args_calls_are_named_then_their_arguments() {
    let model = sentencepiece();
    let marker = model.id("[TOOL_CALLS]");
    let mut called = Vec::new();
    for seed in 0..SEEDS {
        let spec = spec(ToolFormat::MistralArgs, ToolCallChoice::Required, true);
        let output = generate(&model, &spec, seed);
        assert_eq!(output.tokens[0], marker);
        let text = model.tokenizer.decode(&output.tokens, false).unwrap();
        assert!(text.contains("[ARGS]{"), "{text}");
        called.extend(parsed_calls(ToolFormat::MistralArgs, &text));
    }
    called.sort();
    called.dedup();
    assert_eq!(called, ["get_weather", "list_files", "now"]);
}

/// Phi-4-mini's calls, one `functools[` list of them spelled out in text, each parsed back
/// into a call valid for its tool.
#[test]
fn phi4_mini_calls_are_a_functools_list() {
    let model = sentencepiece();
    let mut called = Vec::new();
    for seed in 0..SEEDS {
        let spec = spec(ToolFormat::Phi4Mini, ToolCallChoice::Required, true);
        let output = generate(&model, &spec, seed);
        let text = model.tokenizer.decode(&output.tokens, false).unwrap();
        assert!(text.starts_with("functools[{\"name\": "), "{text}");
        assert!(text.ends_with("}]"), "{text}");
        called.extend(parsed_calls(ToolFormat::Phi4Mini, &text));
    }
    called.sort();
    called.dedup();
    assert_eq!(called, ["get_weather", "list_files", "now"]);
}
