//! Token ids as bytes, for both kinds of vocabulary.

use std::collections::BTreeSet;

use llguidance::toktrie::TokTrie;
use tokenizers::Tokenizer;
use tokenizers::models::bpe::BPE;

use super::{fixture, fixture_tokenizer, sentencepiece};
use crate::constraint::vocabulary::{mid_sequence, token_bytes};
use crate::constraint::{ConstraintError, ConstraintFactory};

fn special(text: &str) -> Vec<u8> {
    let mut bytes = vec![TokTrie::SPECIAL_TOKEN_MARKER];
    bytes.extend(text.as_bytes());
    bytes
}

#[test]
fn byte_level_ids_spell_what_the_tokenizer_decodes() {
    let model = fixture();
    let words = token_bytes(&model.tokenizer, model.factory.n_vocab()).unwrap();
    let mut checked = 0;
    for (id, bytes) in words.iter().enumerate() {
        let id = id as u32;
        if model.eos.contains(&id) || model.tokenizer.id_to_token(id).is_none() {
            continue;
        }
        let text = model.tokenizer.decode(&[id], false).unwrap();
        if text.starts_with("<|") {
            assert_eq!(*bytes, special(&text));
        } else if !text.contains('\u{FFFD}') {
            assert_eq!(*bytes, text.as_bytes(), "id {id}");
            checked += 1;
        }
    }
    assert!(checked > 500);
    assert_eq!(
        words[model.id("<|im_end|>") as usize],
        special("<|im_end|>")
    );
}

#[test]
fn sentencepiece_pieces_are_bytes_spaces_and_text() {
    let model = sentencepiece();
    let words = token_bytes(&model.tokenizer, model.factory.n_vocab() + 3).unwrap();
    assert_eq!(words[model.id("<0x41>") as usize], b"A");
    assert_eq!(words[model.id("<0xE2>") as usize], [0xE2]);
    assert_eq!(words[model.id("▁hello") as usize], b" hello");
    assert_eq!(words[model.id("▁") as usize], b" ");
    assert_eq!(words[model.id("</s>") as usize], special("</s>"));
    assert_eq!(
        words[model.id("[TOOL_CALLS]") as usize],
        special("[TOOL_CALLS]")
    );
    // Ids past the tokenizer, in a padded embedding, spell nothing.
    assert!(words[model.factory.n_vocab()..].iter().all(Vec::is_empty));
}

#[test]
fn text_is_tokenized_as_it_appears_mid_sequence() {
    let model = sentencepiece();
    let ids = model
        .tokenizer
        .encode("hello", false)
        .unwrap()
        .get_ids()
        .to_vec();
    assert_eq!(ids, [model.id("▁hello")]);
    let inner = mid_sequence(&model.tokenizer);
    let ids = inner.encode("hello", false).unwrap().get_ids().to_vec();
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| inner.id_to_token(id).unwrap())
        .collect();
    assert_eq!(pieces.concat(), "hello");
}

#[test]
fn an_embedding_larger_than_the_tokenizer_gets_unproducible_ids() {
    let (tokenizer, n_vocab) = fixture_tokenizer();
    let eos = [tokenizer.token_to_id("<|im_end|>").unwrap()].into();
    let factory = ConstraintFactory::new(tokenizer, n_vocab + 100, &eos).unwrap();
    assert_eq!(factory.n_vocab(), n_vocab + 100);
}

#[test]
fn unusable_vocabularies_are_refused() {
    let (tokenizer, n_vocab) = fixture_tokenizer();
    let refused = |tokenizer: &Tokenizer, n_vocab, eos: &BTreeSet<u32>| match ConstraintFactory::new(
        tokenizer, n_vocab, eos,
    ) {
        Err(ConstraintError::Vocabulary(message)) => message,
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("accepted"),
    };
    let message = refused(tokenizer, *n_vocab, &[*n_vocab as u32 + 5].into());
    assert!(message.contains("end-of-generation"), "{message}");
    let bare = Tokenizer::new(BPE::default());
    let message = refused(&bare, 10, &[0].into());
    assert!(message.contains("decoder"), "{message}");
}
