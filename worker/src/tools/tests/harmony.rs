//! gpt-oss's harmony output, as its template and OpenAI's harmony guide spell it, each checked
//! whole, at every cut and char by char.

use super::*;

use ReasoningStart::Off;
use ToolFormat::Harmony;

const PARIS: &str = r#"{"city":"Paris","unit":"celsius"}"#;

#[test]
fn analysis_is_reasoning_and_final_is_the_answer() {
    let output = "<|channel|>analysis<|message|>User asks for the weather. Easy.<|end|>\
                  <|start|>assistant<|channel|>final<|message|>It is sunny in Paris.";
    assert_eq!(
        parse_clean(config(Harmony, Off, &[]), output),
        [
            reasoning("User asks for the weather. Easy."),
            content("It is sunny in Paris."),
        ]
    );
}

#[test]
fn the_final_message_may_end_with_return_or_end() {
    for end in ["<|return|>", "<|end|>"] {
        let output = format!("<|channel|>final<|message|>Hi there.{end}");
        assert_eq!(
            parse_clean(config(Harmony, Off, &[]), &output),
            [content("Hi there.")]
        );
    }
}

#[test]
fn a_call_with_the_recipient_after_the_channel() {
    let output = "<|channel|>analysis<|message|>Need to use function get_weather.<|end|>\
                  <|start|>assistant<|channel|>commentary to=functions.get_weather \
                  <|constrain|>json<|message|>{\"city\": \"Paris\", \"unit\": \"celsius\"}<|call|>";
    assert_eq!(
        parse_clean(config(Harmony, Off, &[]), output),
        [
            reasoning("Need to use function get_weather."),
            call("get_weather", PARIS),
        ]
    );
}

#[test]
fn a_call_with_the_recipient_in_the_role_header_as_the_template_writes_it() {
    // The prompt ends with `<|start|>assistant`; `<|call|>` is a stop token, so it may be absent.
    let output = " to=functions.get_weather<|channel|>commentary json<|message|>\
                  {\"city\":\"Paris\",\"unit\":\"celsius\"}";
    assert_eq!(
        parse_clean(config(Harmony, Off, &[]), output),
        [call("get_weather", PARIS)]
    );
}

#[test]
fn a_commentary_preamble_is_content() {
    let output = "<|channel|>commentary<|message|>Checking the forecast.<|end|>\
                  <|start|>assistant<|channel|>commentary to=functions.get_weather \
                  <|constrain|>json<|message|>{\"city\":\"Paris\",\"unit\":\"celsius\"}<|call|>";
    assert_eq!(
        parse_clean(config(Harmony, Off, &[]), output),
        [
            content("Checking the forecast."),
            call("get_weather", PARIS)
        ]
    );
}

#[test]
fn a_call_whose_arguments_are_not_json_is_its_text() {
    let output = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>\
                  {city: Paris}<|call|>";
    let (fragments, malformed) = parse(config(Harmony, Off, &[]), output);
    assert_eq!(
        fragments,
        [content(
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>\
             {city: Paris}"
        )]
    );
    assert!(malformed.is_some());
}

#[test]
fn without_tools_a_call_is_content() {
    let output = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}";
    let config = ParserConfig {
        parse_tools: false,
        ..config(Harmony, Off, &[])
    };
    assert_eq!(parse_clean(config, output), [content("{}")]);
}

#[test]
fn output_without_a_header_is_the_answer_as_written() {
    let output = "{\"answer\": 42}";
    assert_eq!(
        parse_clean(config(Harmony, Off, &[]), output),
        [content(output)]
    );
}

#[test]
fn an_unfinished_analysis_stays_reasoning() {
    let mut parser = OutputParser::new(config(Harmony, Off, &[]));
    let mut out = parser.push("<|channel|>analysis<|message|>Let me th");
    assert!(parser.is_reasoning());
    out.extend(parser.finish());
    assert_eq!(merge(out), [reasoning("Let me th")]);
}
