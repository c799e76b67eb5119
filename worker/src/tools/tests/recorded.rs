//! Outputs as the real models write them, each checked whole, at every cut and char by char.

use serde_json::json;

use super::*;

use ReasoningStart::{Inside, Maybe, Off};
use ToolFormat::{Granite, Hermes, Llama3Json, Mistral, QwenXml};

const PARIS: &str = r#"{"city":"Paris","unit":"celsius"}"#;

#[test]
fn qwen25_text_then_a_hermes_call() {
    let output = "I'll check the weather in Paris for you.\n<tool_call>\n{\"name\": \"get_weather\", \
                  \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";
    assert_eq!(
        parse_clean(config(Hermes, Off, &[]), output),
        [
            content("I'll check the weather in Paris for you.\n"),
            call("get_weather", PARIS),
        ]
    );
}

#[test]
fn qwen25_two_parallel_hermes_calls() {
    let output = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \
                  \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \
                  \"arguments\": {\"tz\": \"Europe/London\"}}\n</tool_call>";
    assert_eq!(
        parse_clean(config(Hermes, Off, &[]), output),
        [
            call("get_weather", PARIS),
            call("get_time", r#"{"tz":"Europe/London"}"#),
        ]
    );
}

#[test]
fn text_after_the_calls_is_content() {
    let output = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n\nDone.";
    assert_eq!(
        parse_clean(config(Hermes, Off, &[]), output),
        [call("f", "{}"), content("Done.")]
    );
}

#[test]
fn qwen3_thinks_then_calls() {
    let output = "<think>\nThe user wants the weather in Paris. I should call get_weather.\n\
                  </think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
                  {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";
    assert_eq!(
        parse_clean(config(Hermes, Maybe, &[]), output),
        [
            reasoning("The user wants the weather in Paris. I should call get_weather.\n"),
            call("get_weather", PARIS),
        ]
    );
}

#[test]
fn qwen3_without_thinking_answers_directly() {
    let output = "Hello! How can I help you today?";
    assert_eq!(
        parse_clean(config(Hermes, Maybe, &[]), output),
        [content(output)]
    );
}

#[test]
fn deepseek_r1_starts_inside_its_reasoning() {
    let output = "Okay, 2 + 2 is 4.\n</think>\n\nThe answer is **4**.";
    assert_eq!(
        parse_clean(config(Hermes, Inside, &[]), output),
        [
            reasoning("Okay, 2 + 2 is 4.\n"),
            content("The answer is **4**.")
        ]
    );
}

#[test]
fn unterminated_reasoning_stays_reasoning() {
    let output = "<think>\nLet me count: one, two, thr";
    assert_eq!(
        parse_clean(config(Hermes, Maybe, &[]), output),
        [reasoning("Let me count: one, two, thr")]
    );
}

#[test]
fn reasoning_is_not_scanned_for_calls() {
    let output = "<think>maybe <tool_call>{\"name\": \"f\"}</tool_call>?</think>No.";
    assert_eq!(
        parse(config(Hermes, Maybe, &[]), output).0,
        [
            reasoning("maybe <tool_call>{\"name\": \"f\"}</tool_call>?"),
            content("No.")
        ]
    );
}

fn coder_tools() -> Vec<Value> {
    vec![json!({"type": "function", "function": {
        "name": "write_file",
        "description": "Write a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"},
            "line_count": {"type": "integer"},
            "version": {"type": "string"},
            "overwrite": {"type": "boolean"},
        }, "required": ["path"]},
    }})]
}

#[test]
fn qwen3_coder_xml_call_with_typed_parameters() {
    let tools = coder_tools();
    let output = "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/main.rs\n\
                  </parameter>\n<parameter=line_count>\n42\n</parameter>\n</function>\n\
                  </tool_call>";
    assert_eq!(
        parse_clean(config(QwenXml, Off, &tools), output),
        [call(
            "write_file",
            r#"{"path":"src/main.rs","line_count":42}"#
        )]
    );
}

#[test]
fn xml_values_follow_the_schema_not_their_looks() {
    let tools = coder_tools();
    let output = "Writing it.\n<tool_call>\n<function=write_file>\n<parameter=version>\n2\n\
                  </parameter>\n<parameter=overwrite>\nTrue\n</parameter>\n<parameter=line_count>\n\
                  many\n</parameter>\n<parameter=extra>\n[1, 2]\n</parameter>\n<parameter=note>\n\
                  two\nlines\n</parameter>\n</function>\n</tool_call>";
    assert_eq!(
        parse_clean(config(QwenXml, Off, &tools), output),
        [
            content("Writing it.\n"),
            call(
                "write_file",
                r#"{"version":"2","overwrite":true,"line_count":"many","extra":[1,2],"note":"two\nlines"}"#
            )
        ]
    );
}

#[test]
fn xml_function_without_its_wrapper() {
    let tools = coder_tools();
    let output = "<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n</function>";
    assert_eq!(
        parse_clean(config(QwenXml, Off, &tools), output),
        [call("write_file", r#"{"path":"a.txt"}"#)]
    );
}

#[test]
fn xml_call_cut_off_after_its_last_value_is_parsed() {
    let tools = coder_tools();
    let output = "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n";
    assert_eq!(
        parse_clean(config(QwenXml, Off, &tools), output),
        [call("write_file", r#"{"path":"a.txt"}"#)]
    );
}

#[test]
fn a_tool_call_block_may_hold_the_other_familys_body() {
    let tools = coder_tools();
    let xml = "<tool_call>\n<function=write_file>\n<parameter=line_count>\n7\n</parameter>\n\
               </function>\n</tool_call>";
    assert_eq!(
        parse_clean(config(Hermes, Off, &tools), xml),
        [call("write_file", r#"{"line_count":7}"#)]
    );
    let json = "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {}}\n</tool_call>";
    assert_eq!(
        parse_clean(config(QwenXml, Off, &tools), json),
        [call("write_file", "{}")]
    );
}

const LLAMA_CALL: &str = r#"{"name": "get_weather", "parameters": {"city": "Paris"}}"#;

#[test]
fn llama31_call_after_python_tag() {
    let output = format!("<|python_tag|>{LLAMA_CALL}");
    assert_eq!(
        parse_clean(config(Llama3Json, Off, &[]), &output),
        [call("get_weather", r#"{"city":"Paris"}"#)]
    );
}

#[test]
fn llama31_bare_json_call() {
    let output = format!("\n\n{LLAMA_CALL}");
    assert_eq!(
        parse_clean(config(Llama3Json, Off, &[]), &output),
        [call("get_weather", r#"{"city":"Paris"}"#)]
    );
}

#[test]
fn llama_calls_separated_by_semicolons() {
    let output = format!("{LLAMA_CALL}; {{\"name\": \"get_time\", \"parameters\": {{}}}}");
    assert_eq!(
        parse_clean(config(Llama3Json, Off, &[]), &output),
        [
            call("get_weather", r#"{"city":"Paris"}"#),
            call("get_time", "{}")
        ]
    );
}

#[test]
fn llama_plain_answer_streams_as_content() {
    let output = "The capital of France is Paris. In JSON: {\"capital\": \"Paris\"}";
    assert_eq!(
        parse_clean(config(Llama3Json, Off, &[]), output),
        [content(output)]
    );
}

#[test]
fn llama_json_answer_that_is_not_a_call_is_content() {
    let output = "{\"capital\": \"Paris\"}";
    let (fragments, malformed) = parse(config(Llama3Json, Off, &[]), output);
    assert_eq!(fragments, [content(output)]);
    assert!(malformed.is_some());
}

#[test]
fn mistral_old_format_json_array() {
    let output = "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \
                  \"unit\": \"celsius\"}, \"id\": \"a1b2c3d4e\"}, {\"name\": \"get_time\", \
                  \"arguments\": {}, \"id\": \"f5g6h7i8j\"}]";
    assert_eq!(
        parse_clean(config(Mistral, Off, &[]), output),
        [call("get_weather", PARIS), call("get_time", "{}")]
    );
}

#[test]
fn mistral_new_format_with_call_ids() {
    let output = "Let me check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \
                  \"celsius\"}[TOOL_CALLS]get_time[CALL_ID]x9Yz01[ARGS]{\"tz\": \"CET\"}";
    assert_eq!(
        parse_clean(config(Mistral, Off, &[]), output),
        [
            content("Let me check."),
            call("get_weather", PARIS),
            call("get_time", r#"{"tz":"CET"}"#)
        ]
    );
}

#[test]
fn mistral_new_format_calls_under_one_marker() {
    let output = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}\
                  get_time[ARGS]{}";
    assert_eq!(
        parse_clean(config(Mistral, Off, &[]), output),
        [call("get_weather", PARIS), call("get_time", "{}")]
    );
}

#[test]
fn mistral_section_that_does_not_parse_is_content_after_the_good_calls() {
    let output = "[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]oops, {broken";
    let (fragments, malformed) = parse(config(Mistral, Off, &[]), output);
    assert_eq!(
        fragments,
        [call("f", "{}"), content("[TOOL_CALLS]oops, {broken")]
    );
    assert!(malformed.is_some());
}

#[test]
fn granite_two_calls_in_one_list() {
    let output = "<|tool_call|>[{\"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}, \
                  \"name\": \"get_weather\"}, {\"name\": \"get_time\", \"arguments\": {}}]";
    assert_eq!(
        parse_clean(config(Granite, Off, &[]), output),
        [call("get_weather", PARIS), call("get_time", "{}")]
    );
}

#[test]
fn granite_text_then_lists_each_after_its_marker() {
    let output = "Checking. <|tool_call|>[{\"name\": \"get_weather\", \"arguments\": \
                  {\"city\": \"Paris\", \"unit\": \"celsius\"}}]\n<|tool_call|>[{\"name\": \
                  \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]";
    assert_eq!(
        parse_clean(config(Granite, Off, &[]), output),
        [
            content("Checking. "),
            call("get_weather", PARIS),
            call("get_time", r#"{"tz":"CET"}"#)
        ]
    );
}

#[test]
fn granite_thinks_then_answers_in_its_response_tags() {
    let output = "<think>The user wants a greeting.</think><response>Hello! How can I help?\
                  </response>";
    assert_eq!(
        parse_clean(config(Granite, Maybe, &[]), output),
        [
            reasoning("The user wants a greeting."),
            content("Hello! How can I help?")
        ]
    );
    let plain = "A <response> is not a wrapper here.</response>";
    assert_eq!(
        parse_clean(config(Granite, Maybe, &[]), plain),
        [content(plain)]
    );
}

#[test]
fn granite_list_that_does_not_parse_is_content() {
    let output = "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\"";
    let (fragments, malformed) = parse(config(Granite, Off, &[]), output);
    assert_eq!(fragments, [content(output)]);
    assert!(malformed.unwrap().contains("JSON"));
}

#[test]
fn malformed_hermes_call_comes_back_as_its_exact_text() {
    let output = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \
                  \"Paris\"}\n</tool_call>\nAnything else?";
    let (fragments, malformed) = parse(config(Hermes, Off, &[]), output);
    assert_eq!(fragments, [content(output)]);
    assert!(malformed.unwrap().contains("JSON"));
}

#[test]
fn hermes_call_without_a_name_is_malformed() {
    let output = "<tool_call>\n{\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let (fragments, malformed) = parse(config(Hermes, Off, &[]), output);
    assert_eq!(fragments, [content(output)]);
    assert_eq!(malformed.as_deref(), Some("the call has no name"));
}

#[test]
fn unterminated_hermes_call_is_parsed_at_the_end() {
    let output = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \
                  \\\"Paris\\\", \\\"unit\\\": \\\"celsius\\\"}\"}\n";
    assert_eq!(
        parse_clean(config(Hermes, Off, &[]), output),
        [call("get_weather", PARIS)]
    );
}

#[test]
fn call_cut_off_inside_its_closing_marker_is_parsed() {
    let output = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_ca";
    assert_eq!(
        parse_clean(config(Hermes, Off, &[]), output),
        [call("f", "{}")]
    );
}

#[test]
fn call_cut_off_mid_json_is_content() {
    let output = "<tool_call>\n{\"name\": \"get_weather\", \"argu";
    let (fragments, malformed) = parse(config(Hermes, Off, &[]), output);
    assert_eq!(fragments, [content(output)]);
    assert!(malformed.is_some());
}

#[test]
fn arguments_that_are_not_an_object_are_malformed() {
    let output = "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>";
    let (fragments, malformed) = parse(config(Hermes, Off, &[]), output);
    assert_eq!(fragments, [content(output)]);
    assert!(malformed.is_some());
}

#[test]
fn without_tools_calls_are_plain_content() {
    let output = "<think>hm</think>Text <tool_call>\n{\"name\": \"f\"}\n</tool_call>";
    let parser_config = ParserConfig {
        parse_tools: false,
        ..config(Hermes, Maybe, &[])
    };
    assert_eq!(
        parse(parser_config, output).0,
        [
            reasoning("hm"),
            content("Text <tool_call>\n{\"name\": \"f\"}\n</tool_call>")
        ]
    );
}

#[test]
fn text_that_only_resembles_a_marker_is_released() {
    let output = "a <tool b <think> [TOOL c <|python d <|tool";
    for format in [Hermes, QwenXml, Llama3Json, Mistral, Granite] {
        assert_eq!(
            parse(config(format, Off, &[]), output).0,
            [content(output)],
            "{format:?}"
        );
    }
}

#[test]
fn a_partial_think_marker_at_the_end_is_content() {
    assert_eq!(
        parse(config(Hermes, Maybe, &[]), "  <thi").0,
        [content("  <thi")]
    );
}

#[test]
fn prompt_decides_where_reasoning_starts() {
    const THINK: (&str, &str) = ("<think>", "</think>");
    assert_eq!(
        prompt_opens_reasoning("<|im_start|>assistant\n<think>\n", THINK),
        Inside
    );
    assert_eq!(
        prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n", THINK),
        Off
    );
    assert_eq!(
        prompt_opens_reasoning("<|im_start|>assistant\n", THINK),
        Maybe
    );
}

#[test]
fn long_outputs_fed_by_the_character_stay_linear() {
    // Quadratic work would take minutes here.
    let value = "x".repeat(300_000);
    let output = format!(
        "{}<think>{value}</think>{value}<tool_call>{{\"name\": \"f\", \"arguments\": \
         {{\"v\": \"{value}\"}}}}</tool_call>",
        " ".repeat(100_000)
    );
    let mut parser = OutputParser::new(config(Hermes, Maybe, &[]));
    let mut calls = 0;
    for c in output.chars() {
        let mut chars = [0; 4];
        calls += parser
            .push(c.encode_utf8(&mut chars))
            .iter()
            .filter(|f| matches!(f, Fragment::ToolCall(_)))
            .count();
    }
    assert_eq!(calls, 1);
}
