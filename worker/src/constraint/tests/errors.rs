//! Refusals name what was refused; nothing a request holds makes the worker panic.

use serde_json::json;

use super::{fixture, refusal, sentencepiece};
use crate::constraint::{Constraint, ConstraintError, GrammarSpec, ToolCallChoice};
use crate::tools::ToolFormat;

fn schema(schema: serde_json::Value, strict: bool) -> GrammarSpec {
    GrammarSpec::JsonSchema { schema, strict }
}

#[test]
fn a_schema_that_is_not_an_object_is_refused() {
    let model = fixture();
    for value in [json!([{"type": "string"}]), json!("object"), json!(true)] {
        let message = refusal(&model, &schema(value, false));
        assert!(message.contains("not a JSON object"), "{message}");
    }
}

#[test]
fn strict_refuses_a_keyword_llguidance_cannot_enforce_and_lenient_ignores_it() {
    let model = fixture();
    let unique = json!({"type": "array", "items": {"type": "integer"}, "uniqueItems": true});
    let message = refusal(&model, &schema(unique.clone(), true));
    assert!(message.contains("uniqueItems"), "{message}");
    Constraint::compile(&model.factory, &schema(unique, false)).unwrap();
}

#[test]
fn a_lark_grammar_that_does_not_parse_is_refused_with_its_position() {
    let model = fixture();
    let message = refusal(&model, &GrammarSpec::Lark("start: \"a\" (".into()));
    assert!(message.starts_with("Lark grammar refused"), "{message}");
    let message = refusal(&model, &GrammarSpec::Lark("start: missing_rule".into()));
    assert!(message.contains("missing_rule"), "{message}");
}

#[test]
fn the_mistral_format_needs_its_tool_calls_token() {
    let spec = GrammarSpec::ToolCalls {
        format: ToolFormat::Mistral,
        tools: vec![json!({"type": "function", "function": {"name": "f"}})],
        choice: ToolCallChoice::Required,
        parallel: false,
    };
    let message = refusal(&fixture(), &spec);
    assert!(message.contains("[TOOL_CALLS]"), "{message}");
    Constraint::compile(&sentencepiece().factory, &spec).unwrap();
}

#[test]
fn tool_refusals_name_the_tool() {
    let model = fixture();
    let tools = vec![
        json!({"type": "function", "function": {"name": "fine"}}),
        json!({"type": "function", "function": {
            "name": "picky",
            "strict": true,
            "parameters": {"type": "object", "properties": {"x": {"not": {"type": "string"}}}},
        }}),
    ];
    let calls = |tools: Vec<serde_json::Value>, choice| GrammarSpec::ToolCalls {
        format: ToolFormat::Hermes,
        tools,
        choice,
        parallel: false,
    };
    let message = refusal(&model, &calls(tools.clone(), ToolCallChoice::Required));
    assert!(
        message.contains("\"picky\"") && message.contains("not"),
        "{message}"
    );
    let message = refusal(
        &model,
        &calls(tools.clone(), ToolCallChoice::Named("absent".into())),
    );
    assert!(message.contains("\"absent\""), "{message}");
    let nameless = vec![
        tools[0].clone(),
        json!({"type": "function", "function": {}}),
    ];
    let message = refusal(&model, &calls(nameless, ToolCallChoice::Required));
    assert!(message.contains("tools[1]"), "{message}");
    let message = refusal(&model, &calls(Vec::new(), ToolCallChoice::Required));
    assert!(message.contains("no tools"), "{message}");
    let bad = vec![json!({"type": "function", "function": {"name": "f", "parameters": 3}})];
    let message = refusal(&model, &calls(bad, ToolCallChoice::Required));
    assert!(message.contains("\"f\""), "{message}");
}

#[test]
fn a_disallowed_token_or_a_wrong_logits_length_is_an_error() {
    let model = fixture();
    let spec = GrammarSpec::Lark(r#"start: "yes""#.into());
    let mut constraint = Constraint::compile(&model.factory, &spec).unwrap();
    let mut short = vec![0.0; 10];
    assert!(matches!(
        constraint.mask(&mut short),
        Err(ConstraintError::LogitsLength { got: 10, .. })
    ));
    let no = model.tokenizer.encode("no", false).unwrap().get_ids()[0];
    assert!(matches!(
        constraint.accept(no),
        Err(ConstraintError::Matcher(_))
    ));
    let past = model.factory.n_vocab() as u32;
    let mut fresh = Constraint::compile(&model.factory, &spec).unwrap();
    assert!(matches!(
        fresh.accept(past),
        Err(ConstraintError::Matcher(_))
    ));
}
