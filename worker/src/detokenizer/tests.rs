use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, DecoderWrapper};

use super::*;

const TEXT: &str = "héllo 日本語 🦀 wörld";

/// GPT-2 style byte-level BPE with no merges: every byte is its own token, so each multi-byte
/// character spans two to four tokens.
fn byte_level() -> Arc<Tokenizer> {
    let mut alphabet: Vec<char> = ByteLevel::alphabet().into_iter().collect();
    alphabet.sort_unstable();
    let vocab: Vocab = alphabet
        .iter()
        .enumerate()
        .map(|(id, c)| (c.to_string(), id as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, Vec::new())
        .build()
        .expect("valid BPE");
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)));
    tokenizer.with_decoder(Some(ByteLevel::default()));
    tokenizer.add_special_tokens(&[AddedToken::from("<|end|>", true)]);
    Arc::new(tokenizer)
}

/// Llama 2 style SentencePiece pieces with byte fallback and a stripped leading space, plus the
/// special token `</s>`.
fn sentencepiece() -> (Arc<Tokenizer>, HashMap<&'static str, u32>) {
    let pieces = [
        "<unk>", "▁Hello", "▁world", "▁", "<0xE6>", "<0x97>", "<0xA5>", "!",
    ];
    let ids: HashMap<&str, u32> = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| (*p, i as u32))
        .collect();
    let vocab = ids
        .iter()
        .map(|(p, &i)| (p.to_string(), i))
        .collect::<HashMap<_, _>>();
    let model = WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token("<unk>".into())
        .build()
        .expect("valid WordLevel");
    let decoders: Vec<DecoderWrapper> = vec![
        Replace::new("▁", " ").expect("valid pattern").into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
        Strip::new(' ', 1, 0).into(),
    ];
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_decoder(Some(Sequence::new(decoders)));
    tokenizer.add_special_tokens(&[AddedToken::from("</s>", true)]);
    (Arc::new(tokenizer), ids)
}

fn encode(tokenizer: &Tokenizer, text: &str) -> Vec<u32> {
    tokenizer
        .encode(text, false)
        .expect("encodable")
        .get_ids()
        .to_vec()
}

fn deltas(tokenizer: &Arc<Tokenizer>, ids: &[u32]) -> Vec<String> {
    let mut detok = Detokenizer::new(Arc::clone(tokenizer));
    let mut out: Vec<String> = ids
        .iter()
        .map(|&id| detok.push(id).expect("decodable"))
        .collect();
    out.push(detok.finish().expect("decodable"));
    out
}

#[test]
fn deltas_concatenate_to_the_full_decode() {
    let tokenizer = byte_level();
    let ids = encode(&tokenizer, TEXT);
    assert!(
        ids.len() > TEXT.chars().count(),
        "multi-byte chars span several tokens"
    );
    let joined: String = deltas(&tokenizer, &ids).concat();
    assert_eq!(joined, tokenizer.decode(&ids, true).unwrap());
    assert_eq!(joined, TEXT);
}

#[test]
fn a_partial_character_is_held_until_complete() {
    let tokenizer = byte_level();
    let ids = encode(&tokenizer, "🦀");
    assert_eq!(ids.len(), 4);
    let got = deltas(&tokenizer, &ids);
    assert_eq!(got, ["", "", "", "🦀", ""]);
}

#[test]
fn no_delta_ever_holds_a_replacement_character() {
    let tokenizer = byte_level();
    for delta in deltas(&tokenizer, &encode(&tokenizer, TEXT)) {
        assert!(!delta.contains('\u{FFFD}'), "{delta:?}");
    }
}

#[test]
fn special_tokens_are_skipped() {
    let tokenizer = byte_level();
    let end = tokenizer.token_to_id("<|end|>").expect("added");
    let mut ids = encode(&tokenizer, "hi ");
    ids.push(end);
    ids.extend(encode(&tokenizer, "wörld"));
    assert_eq!(deltas(&tokenizer, &ids).concat(), "hi wörld");
}

#[test]
fn the_window_stays_small_over_long_generations() {
    let tokenizer = byte_level();
    let ids = encode(&tokenizer, &TEXT.repeat(200));
    let mut detok = Detokenizer::new(Arc::clone(&tokenizer));
    let mut longest = 0;
    let mut joined = String::new();
    for id in ids {
        joined.push_str(&detok.push(id).unwrap());
        longest = longest.max(detok.window.len());
    }
    assert!(
        longest <= 2 * MAX_INCOMPLETE,
        "window reached {longest} tokens"
    );
    assert_eq!(joined, TEXT.repeat(200));
}

#[test]
fn invalid_bytes_are_released_rather_than_held_forever() {
    let tokenizer = byte_level();
    // A lone lead byte repeated: never a complete character.
    let lead = encode(&tokenizer, "é")[0];
    let got = deltas(&tokenizer, &[lead; 10]);
    let joined = got.concat();
    assert_eq!(
        joined.chars().filter(|&c| c == '\u{FFFD}').count(),
        10,
        "{got:?}"
    );
    assert!(
        got[..9].iter().any(|d| !d.is_empty()),
        "released before the end: {got:?}"
    );
}

#[test]
fn an_incomplete_character_at_the_end_is_flushed_by_finish() {
    let tokenizer = byte_level();
    let mut ids = encode(&tokenizer, "ok ");
    ids.push(encode(&tokenizer, "日")[0]);
    let got = deltas(&tokenizer, &ids);
    assert_eq!(got.concat(), "ok \u{FFFD}");
    assert_eq!(got.last().map(String::as_str), Some("\u{FFFD}"));
}

#[test]
fn sentencepiece_spaces_and_byte_fallback_come_out_right() {
    let (tokenizer, id) = sentencepiece();
    let ids = [
        id["▁Hello"],
        id["▁world"],
        id["▁"],
        id["<0xE6>"],
        id["<0x97>"],
        id["<0xA5>"],
        id["!"],
    ];
    let got = deltas(&tokenizer, &ids);
    assert_eq!(got.concat(), tokenizer.decode(&ids, true).unwrap());
    assert_eq!(got.concat(), "Hello world 日!");
    assert_eq!(got[1], " world", "the context keeps the inner space");
}

#[test]
fn a_decoder_that_rewrites_its_context_does_not_panic() {
    assert_eq!(suffix_after("日本", 1), "日本");
    assert_eq!(suffix_after("日本", 3), "本");
    assert_eq!(suffix_after("ab", 5), "");
}

#[test]
fn a_skipped_special_token_does_not_eat_the_next_space() {
    let (tokenizer, id) = sentencepiece();
    let end = tokenizer.token_to_id("</s>").expect("added");
    let ids = [id["▁Hello"], end, id["▁world"]];
    let got = deltas(&tokenizer, &ids);
    assert_eq!(got.concat(), tokenizer.decode(&ids, true).unwrap());
    assert_eq!(got.concat(), "Hello world");
}

#[test]
fn a_long_run_of_special_tokens_keeps_the_window_bounded() {
    let tokenizer = byte_level();
    let end = tokenizer.token_to_id("<|end|>").expect("added");
    let mut detok = Detokenizer::new(Arc::clone(&tokenizer));
    assert_eq!(detok.push(encode(&tokenizer, "a")[0]).unwrap(), "a");
    for _ in 0..100 {
        assert_eq!(detok.push(end).unwrap(), "");
        assert!(
            detok.window.len() <= 2 * MAX_SILENT,
            "{}",
            detok.window.len()
        );
    }
}

/// The byte-level tokenizer plus Mistral's `[TOOL_CALLS]` as a special token.
fn with_marker(tokenizer: &Arc<Tokenizer>) -> (Arc<Tokenizer>, u32) {
    let mut tokenizer = Tokenizer::clone(tokenizer);
    tokenizer.add_special_tokens(&[AddedToken::from("[TOOL_CALLS]", true)]);
    let id = tokenizer.token_to_id("[TOOL_CALLS]").expect("added");
    (Arc::new(tokenizer), id)
}

fn kept_deltas(tokenizer: &Arc<Tokenizer>, keep: u32, ids: &[u32]) -> Vec<String> {
    let mut detok = Detokenizer::new(Arc::clone(tokenizer)).keep_tokens([keep]);
    let mut out: Vec<String> = ids
        .iter()
        .map(|&id| detok.push(id).expect("decodable"))
        .collect();
    out.push(detok.finish().expect("decodable"));
    out
}

#[test]
fn a_kept_special_token_comes_out_as_its_text_in_order() {
    let (tokenizer, marker) = with_marker(&byte_level());
    let mut ids = encode(&tokenizer, "Sure. ");
    ids.push(marker);
    ids.extend(encode(&tokenizer, "[{\"name\": \"f\"}]"));
    let got = kept_deltas(&tokenizer, marker, &ids);
    assert_eq!(got.concat(), "Sure. [TOOL_CALLS][{\"name\": \"f\"}]");
    assert_eq!(
        got[ids.iter().position(|&id| id == marker).unwrap()],
        "[TOOL_CALLS]"
    );
}

#[test]
fn a_kept_token_flushes_the_pending_text_before_itself() {
    let (tokenizer, marker) = with_marker(&byte_level());
    let lead = encode(&tokenizer, "日")[0];
    let mut detok = Detokenizer::new(Arc::clone(&tokenizer)).keep_tokens([marker]);
    assert_eq!(
        detok.push(lead).unwrap(),
        "",
        "held as an incomplete character"
    );
    assert_eq!(detok.push(marker).unwrap(), "\u{FFFD}[TOOL_CALLS]");
    assert_eq!(detok.push(encode(&tokenizer, "a")[0]).unwrap(), "a");
}

#[test]
fn special_tokens_that_are_not_kept_are_still_skipped() {
    let (tokenizer, marker) = with_marker(&byte_level());
    let end = tokenizer.token_to_id("<|end|>").expect("added");
    let mut ids = encode(&tokenizer, "a");
    ids.extend([end, marker]);
    ids.extend(encode(&tokenizer, "b"));
    assert_eq!(
        kept_deltas(&tokenizer, marker, &ids).concat(),
        "a[TOOL_CALLS]b"
    );
    assert_eq!(
        deltas(&tokenizer, &ids).concat(),
        "ab",
        "nothing kept by default"
    );
}

#[test]
fn the_token_after_a_kept_one_keeps_its_leading_space() {
    let (tokenizer, id) = sentencepiece();
    let (tokenizer, marker) = with_marker(&tokenizer);
    let ids = [id["▁Hello"], marker, id["▁world"]];
    let got = kept_deltas(&tokenizer, marker, &ids);
    assert_eq!(got.concat(), "Hello[TOOL_CALLS] world");
}

#[test]
fn kept_tokens_keep_the_window_bounded() {
    let (tokenizer, marker) = with_marker(&byte_level());
    let mut detok = Detokenizer::new(Arc::clone(&tokenizer)).keep_tokens([marker]);
    for _ in 0..100 {
        assert_eq!(detok.push(marker).unwrap(), "[TOOL_CALLS]");
        assert!(detok.window.is_empty(), "{}", detok.window.len());
    }
}
