//! JSON outputs: schemas, any object, and how the text is laid out.

use serde::de::IgnoredAny;
use serde_json::{Value, json};

use super::schema::{check, check_compact};
use super::{Model, SEEDS, fixture, generate, sentencepiece};
use crate::constraint::{Constraint, GrammarSpec};

fn weather() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "temperature": {"type": "number", "minimum": -90, "maximum": 60},
            "alerts": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
            "note": {"type": "string", "maxLength": 5},
        },
        "required": ["city", "unit", "days", "temperature", "alerts"],
        "additionalProperties": false,
    })
}

fn schema_outputs_validate(model: &Model) {
    let schema = weather();
    let spec = GrammarSpec::JsonSchema {
        schema: schema.clone(),
        strict: true,
    };
    for seed in 0..SEEDS {
        let output = generate(model, &spec, seed);
        // Every value is bounded, so the output is too: a few tokens per character at most.
        assert!(output.tokens.len() < 200, "seed {seed}: {}", output.text);
        let value: Value = serde_json::from_str(&output.text)
            .unwrap_or_else(|error| panic!("seed {seed}: {error} in {}", output.text));
        check(&value, &schema);
        check_compact(&output.text);
        // Keys come in schema order; only the optional `note` may be missing.
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let expected = ["city", "unit", "days", "temperature", "alerts", "note"];
        assert_eq!(keys, expected[..keys.len()], "seed {seed}");
    }
}

#[test]
fn json_schema_outputs_validate_on_a_byte_level_vocabulary() {
    schema_outputs_validate(&fixture());
}

#[test]
fn json_schema_outputs_validate_on_a_sentencepiece_vocabulary() {
    schema_outputs_validate(&sentencepiece());
}

#[test]
fn json_object_outputs_are_objects() {
    for model in [fixture(), sentencepiece()] {
        for seed in 0..SEEDS {
            let output = generate(&model, &GrammarSpec::JsonObject, seed);
            // Unbounded numbers may overflow an f64 (`1E84041`), which `Value` refuses: check
            // the syntax without converting them.
            serde_json::from_str::<IgnoredAny>(&output.text)
                .unwrap_or_else(|error| panic!("seed {seed}: {error} in {}", output.text));
            assert!(output.text.starts_with('{'), "seed {seed}: {}", output.text);
            check_compact(&output.text);
        }
    }
}

#[test]
fn a_complete_grammar_allows_only_the_end_of_generation_tokens() {
    let model = fixture();
    let spec = GrammarSpec::Lark(r#"start: "yes" | "no""#.into());
    let mut constraint = Constraint::compile(&model.factory, &spec).unwrap();
    for token in model.tokenizer.encode("yes", false).unwrap().get_ids() {
        assert!(!constraint.is_finished());
        let mut logits = vec![0.0; model.factory.n_vocab()];
        constraint.mask(&mut logits).unwrap();
        assert!(logits[*token as usize].is_finite());
        constraint.accept(*token).unwrap();
    }
    assert!(constraint.is_finished());
    let mut logits = vec![0.0; model.factory.n_vocab()];
    constraint.mask(&mut logits).unwrap();
    let allowed: Vec<u32> = (0..logits.len() as u32)
        .filter(|&id| logits[id as usize].is_finite())
        .collect();
    assert_eq!(allowed, model.eos.iter().copied().collect::<Vec<_>>());
}

#[test]
fn a_grammar_that_may_go_on_ends_at_an_accepted_end_token() {
    let model = fixture();
    // Digits may always go on, so only an end token ends the output.
    let spec = GrammarSpec::Lark("start: /[0-9]+/".into());
    for seed in 0..SEEDS {
        let output = generate(&model, &spec, seed);
        assert!(
            output.text.chars().all(|c| c.is_ascii_digit()),
            "{}",
            output.text
        );
        assert!(output.ended_by_eos);
    }
    let mut constraint = Constraint::compile(&model.factory, &spec).unwrap();
    let one = model.tokenizer.encode("1", false).unwrap().get_ids()[0];
    constraint.accept(one).unwrap();
    let eos = *model.eos.first().unwrap();
    constraint.accept(eos).unwrap();
    assert!(constraint.is_finished());
}

#[test]
fn a_lark_grammar_constrains_the_output() {
    let model = sentencepiece();
    let spec = GrammarSpec::Lark(
        r#"start: "answer: " ("yes" | "no") "; " %json {"type": "integer", "minimum": 0, "maximum": 99}"#
            .into(),
    );
    for seed in 0..SEEDS {
        let output = generate(&model, &spec, seed);
        let rest = output
            .text
            .strip_prefix("answer: yes; ")
            .or_else(|| output.text.strip_prefix("answer: no; "))
            .unwrap_or_else(|| panic!("{}", output.text));
        assert!(rest.parse::<u8>().is_ok_and(|n| n <= 99), "{}", output.text);
        assert!(!output.tokens.is_empty());
    }
}

#[test]
fn a_guessed_continuation_is_cut_at_the_first_token_the_grammar_forbids() {
    let model = fixture();
    let spec = GrammarSpec::Lark(r#"start: "answer: " ("yes" | "no") "!""#.into());
    let mut constraint = Constraint::compile(&model.factory, &spec).unwrap();
    let encode = |text: &str| {
        model
            .tokenizer
            .encode(text, false)
            .unwrap()
            .get_ids()
            .to_vec()
    };
    let allowed = encode("answer: yes!");
    assert_eq!(constraint.allowed_prefix(&allowed), allowed.len());
    let mut guessed = encode("answer: ");
    let valid = guessed.len();
    guessed.extend(encode("maybe!"));
    assert_eq!(constraint.allowed_prefix(&guessed), valid);
    // Checking moves nothing: the grammar still starts at "answer".
    for &token in &allowed {
        constraint.accept(token).unwrap();
    }
    assert!(constraint.is_finished());
    assert_eq!(constraint.allowed_prefix(&allowed), 0);
}
