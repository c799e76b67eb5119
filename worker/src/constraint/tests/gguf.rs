//! A vocabulary rebuilt from GGUF metadata spells every token as its `tokenizer.json` does.

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, GgufType, Size};
use serde_json::json;

use super::{Model, fixture, fixture_tokenizer, generate};
use crate::constraint::GrammarSpec;
use crate::constraint::vocabulary::token_bytes;
use crate::gguf::{GgufHeader, check};

#[test]
fn a_gguf_tokenizer_spells_tokens_as_its_tokenizer_json_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fixture.gguf");
    let options = FixtureOptions {
        size: Size::Tiny,
        arch: Arch::Qwen2,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Gguf(GgufType::F32),
    };
    corral_fixture::generate(&options, &path).unwrap();
    let (_, tokenizer) = check(&GgufHeader::read(&path).unwrap()).unwrap();
    let (_, n_vocab) = fixture_tokenizer();
    let reference = fixture();
    assert_eq!(
        token_bytes(&tokenizer, *n_vocab).unwrap(),
        token_bytes(&reference.tokenizer, *n_vocab).unwrap()
    );
    let model = Model::new(tokenizer, *n_vocab, reference.eos.clone());
    let schema = json!({
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": false,
    });
    let output = generate(
        &model,
        &GrammarSpec::JsonSchema {
            schema,
            strict: true,
        },
        0,
    );
    assert!(output.text.starts_with("{\"ok\": "), "{}", output.text);
}
