//! The model's vocabulary as llguidance sees it: every token id as the bytes it stands for, in a
//! `TokTrie`, and a `TokenizerEnv` that tokenizes text the grammar forces with the model's own
//! tokenizer, so forced text gets the tokens the model was trained on.
//!
//! Token bytes, by kind of tokenizer:
//! - byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM): each character of a piece stands for one
//!   byte through GPT-2's byte-to-character table;
//! - SentencePiece (Llama 2, Mistral, GGUF `llama`): `<0xNN>` is the byte NN, `▁` a space, the
//!   rest is the piece's UTF-8;
//! - added tokens: a special one is `TokTrie::SPECIAL_TOKEN_MARKER` then its text, so only a
//!   grammar that names it can produce it; a non-special one (Qwen's `<tool_call>`) is its text,
//!   so a literal `<tool_call>` in a grammar is producible by it or by smaller pieces.
//!
//! Ids past the tokenizer (an embedding padded beyond it) have no bytes and are never allowed.

use std::collections::BTreeSet;
use std::sync::Arc;

use llguidance::ParserFactory;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use tokenizers::pre_tokenizers::metaspace::PrependScheme;
use tokenizers::{DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, Tokenizer};

use super::ConstraintError;

/// toktrie stores a token's depth in 10 bits: longer tokens cannot be inserted. Real
/// vocabularies stay far below; a longer token is left without bytes.
const MAX_TOKEN_BYTES: usize = 1000;
/// toktrie's node index has 22 bits for subtree sizes.
const MAX_VOCAB: usize = 1 << 21;

/// Compiles requests' grammars against one model's vocabulary; built once per model.
pub struct ConstraintFactory {
    parsers: ParserFactory,
    n_vocab: usize,
}

impl ConstraintFactory {
    /// `n_vocab` is the length of the model's logits, `eos` its end-of-generation ids (the
    /// tokens a complete grammar allows).
    pub fn new(
        tokenizer: &Tokenizer,
        n_vocab: usize,
        eos: &BTreeSet<u32>,
    ) -> Result<Self, ConstraintError> {
        let env: TokEnv = Arc::new(Vocabulary::new(tokenizer, n_vocab, eos)?);
        let mut parsers = ParserFactory::new_simple(&env)
            .map_err(|error| ConstraintError::Vocabulary(format!("{error:#}")))?;
        // A worker's stderr is its log: llguidance's own warnings stay out of it.
        parsers.quiet();
        // The grammar and parser state would otherwise be appended to every error.
        parsers.limits_mut().verbose_errors = false;
        Ok(Self { parsers, n_vocab })
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    pub(super) fn parsers(&self) -> &ParserFactory {
        &self.parsers
    }

    /// The id of the token spelled `text`: a special token of that name first, else a plain one.
    pub(super) fn token_id(&self, text: &str) -> Option<u32> {
        let trie = self.parsers.tok_env().tok_trie();
        trie.get_special_token(text).or_else(|| {
            (!text.is_empty())
                .then(|| trie.token_id(text.as_bytes()))
                .flatten()
        })
    }
}

/// The `TokenizerEnv` llguidance compiles against.
struct Vocabulary {
    trie: TokTrie,
    /// The model's tokenizer without the space SentencePiece prepends to a text: forced text is
    /// tokenized mid-sequence, where no space belongs.
    tokenizer: Tokenizer,
}

impl Vocabulary {
    fn new(
        tokenizer: &Tokenizer,
        n_vocab: usize,
        eos: &BTreeSet<u32>,
    ) -> Result<Self, ConstraintError> {
        if n_vocab == 0 || n_vocab >= MAX_VOCAB {
            return Err(ConstraintError::Vocabulary(format!(
                "a vocabulary of {n_vocab} tokens"
            )));
        }
        let eos: Vec<u32> = eos
            .iter()
            .copied()
            .filter(|&id| (id as usize) < n_vocab)
            .collect();
        let Some(&first_eos) = eos.first() else {
            return Err(ConstraintError::Vocabulary(
                "no end-of-generation token within the vocabulary".into(),
            ));
        };
        let words = token_bytes(tokenizer, n_vocab)?;
        let info = TokRxInfo::new(n_vocab as u32, first_eos);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
        Ok(Self {
            trie,
            tokenizer: mid_sequence(tokenizer),
        })
    }

    /// The tokenizer's ids for `text` when they spell it exactly in the trie; otherwise (a special
    /// token matched inside the text, an id past the logits, an encoding error) the trie's
    /// greedy split, which always spells it.
    fn encode(&self, text: &str) -> Vec<TokenId> {
        match self.tokenizer.encode(text, false) {
            Ok(encoding) if self.spells(encoding.get_ids(), text.as_bytes()) => {
                encoding.get_ids().to_vec()
            }
            _ => self.trie.greedy_tokenize(text.as_bytes()),
        }
    }

    fn spells(&self, ids: &[u32], mut text: &[u8]) -> bool {
        for &id in ids {
            if id as usize >= self.trie.vocab_size() {
                return false;
            }
            match text.strip_prefix(self.trie.token(id)) {
                Some(rest) => text = rest,
                None => return false,
            }
        }
        text.is_empty()
    }
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Invalid UTF-8 (a grammar allowing raw bytes) goes through the trie's greedy split; the
    /// valid runs around it through the tokenizer.
    fn tokenize_bytes(&self, bytes: &[u8]) -> Vec<TokenId> {
        self.trie
            .tokenize_with_greedy_fallback(bytes, |text| self.encode(text))
    }
}

/// How a tokenizer's pieces spell bytes, read from its decoder.
#[derive(Clone, Copy)]
enum Pieces {
    ByteLevel,
    SentencePiece,
}

fn pieces(tokenizer: &Tokenizer) -> Result<Pieces, ConstraintError> {
    fn find(decoder: &DecoderWrapper) -> Option<Pieces> {
        match decoder {
            DecoderWrapper::ByteLevel(_) => Some(Pieces::ByteLevel),
            DecoderWrapper::ByteFallback(_) | DecoderWrapper::Metaspace(_) => {
                Some(Pieces::SentencePiece)
            }
            DecoderWrapper::Sequence(sequence) => {
                let found: Vec<Pieces> = sequence.get_decoders().iter().filter_map(find).collect();
                // Byte-level wins: its table also covers what a fallback decoder would.
                found
                    .iter()
                    .find(|kind| matches!(kind, Pieces::ByteLevel))
                    .or(found.first())
                    .copied()
            }
            _ => None,
        }
    }
    tokenizer.get_decoder().and_then(find).ok_or_else(|| {
        ConstraintError::Vocabulary(
            "the tokenizer is neither byte-level BPE nor SentencePiece (its decoder has no \
             ByteLevel, ByteFallback or Metaspace step)"
                .into(),
        )
    })
}

/// Every id below `n_vocab` as bytes; see the file comment.
pub(super) fn token_bytes(
    tokenizer: &Tokenizer,
    n_vocab: usize,
) -> Result<Vec<Vec<u8>>, ConstraintError> {
    let kind = pieces(tokenizer)?;
    let added = tokenizer.get_added_tokens_decoder();
    let byte_of = byte_level_table();
    let words = (0..n_vocab as u32)
        .map(|id| {
            let bytes = match (added.get(&id), tokenizer.id_to_token(id)) {
                (Some(token), _) if token.special => {
                    let mut bytes = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    bytes.extend(token.content.as_bytes());
                    bytes
                }
                (Some(token), _) => token.content.clone().into_bytes(),
                (None, Some(piece)) => match kind {
                    Pieces::ByteLevel => byte_level_bytes(&piece, &byte_of).unwrap_or_default(),
                    Pieces::SentencePiece => sentencepiece_bytes(&piece),
                },
                (None, None) => Vec::new(),
            };
            if bytes.len() > MAX_TOKEN_BYTES {
                Vec::new()
            } else {
                bytes
            }
        })
        .collect();
    Ok(words)
}

/// GPT-2's table, inverted: printable Latin-1 bytes are their own character, the other 68 bytes
/// are U+0100 onwards in byte order. Indexed by character.
fn byte_level_table() -> Vec<Option<u8>> {
    let printable = |byte: u8| matches!(byte, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut table = vec![None; 0x100 + 68];
    let mut next = 0x100;
    for byte in 0..=255u8 {
        if printable(byte) {
            table[byte as usize] = Some(byte);
        } else {
            table[next] = Some(byte);
            next += 1;
        }
    }
    table
}

/// `None` when a character is outside the table: not a byte-level piece, left unproducible.
fn byte_level_bytes(piece: &str, byte_of: &[Option<u8>]) -> Option<Vec<u8>> {
    piece
        .chars()
        .map(|c| byte_of.get(c as usize).copied().flatten())
        .collect()
}

fn sentencepiece_bytes(piece: &str) -> Vec<u8> {
    let byte = piece
        .strip_prefix("<0x")
        .and_then(|rest| rest.strip_suffix('>'))
        .filter(|hex| hex.len() == 2)
        .and_then(|hex| u8::from_str_radix(hex, 16).ok());
    match byte {
        Some(byte) => vec![byte],
        None => piece.replace('▁', " ").into_bytes(),
    }
}

/// A copy of `tokenizer` that encodes text as it appears mid-sequence: no `▁` prepended (a
/// `Prepend` normalizer, a Metaspace pre-tokenizer's prepend scheme), no padding or truncation.
pub(super) fn mid_sequence(tokenizer: &Tokenizer) -> Tokenizer {
    fn normalizer(step: &NormalizerWrapper) -> Option<NormalizerWrapper> {
        match step {
            NormalizerWrapper::Prepend(_) => None,
            NormalizerWrapper::Sequence(sequence) => {
                let kept: Vec<_> = sequence.as_ref().iter().filter_map(normalizer).collect();
                (!kept.is_empty()).then(|| tokenizers::normalizers::Sequence::new(kept).into())
            }
            other => Some(other.clone()),
        }
    }
    fn pre_tokenizer(step: &PreTokenizerWrapper) -> PreTokenizerWrapper {
        match step {
            PreTokenizerWrapper::Metaspace(metaspace) => {
                let mut metaspace = metaspace.clone();
                metaspace.set_prepend_scheme(PrependScheme::Never);
                metaspace.into()
            }
            PreTokenizerWrapper::Sequence(sequence) => {
                tokenizers::pre_tokenizers::sequence::Sequence::new(
                    sequence.as_ref().iter().map(pre_tokenizer).collect(),
                )
                .into()
            }
            other => other.clone(),
        }
    }
    let mut copy = tokenizer.clone();
    let normalized = tokenizer.get_normalizer().and_then(normalizer);
    copy.with_normalizer(normalized);
    let pre_tokenized = tokenizer.get_pre_tokenizer().map(pre_tokenizer);
    copy.with_pre_tokenizer(pre_tokenized);
    copy.with_padding(None);
    // Truncation off cannot fail; the error type covers turning it on with bad parameters.
    let _ = copy.with_truncation(None);
    copy
}
