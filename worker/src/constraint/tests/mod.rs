//! Constraints driven by a pseudo-random "model": each step draws logits from a seeded RNG,
//! masks them and takes the argmax, which is a uniform draw among the allowed tokens. Outputs are
//! then checked against the grammar's shape, so the checks hold for any model. Two vocabularies:
//! the fixture's byte-level BPE (from its `tokenizer.json`) and a SentencePiece one with byte
//! fallback, built here like the GGUF `llama` tokenizer (with Mistral's `[TOOL_CALLS]`).
//!
//! Free text is unbounded under a uniform draw, so test schemas cap strings with `maxLength`.

mod errors;
mod gguf;
mod json;
mod schema;
mod tools;
mod vocabulary;

use std::collections::BTreeSet;
use std::sync::OnceLock;

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::{AddedToken, Tokenizer};

use super::{Constraint, ConstraintError, ConstraintFactory, GrammarSpec};

/// Seeds per property checked.
const SEEDS: u64 = 20;
/// A hang guard: a uniform draw writes any-JSON values of a heavy-tailed length (thousands of
/// tokens for some seeds). Small schemas assert much tighter bounds themselves.
const MAX_TOKENS: usize = 20_000;

/// A tokenizer and the factory built over it.
struct Model {
    tokenizer: Tokenizer,
    factory: ConstraintFactory,
    eos: BTreeSet<u32>,
}

impl Model {
    fn new(tokenizer: Tokenizer, n_vocab: usize, eos: BTreeSet<u32>) -> Self {
        let factory = ConstraintFactory::new(&tokenizer, n_vocab, &eos).unwrap();
        Self {
            tokenizer,
            factory,
            eos,
        }
    }

    fn id(&self, token: &str) -> u32 {
        self.tokenizer.token_to_id(token).unwrap()
    }
}

/// The fixture's tokenizer, generated once per test binary.
fn fixture_tokenizer() -> &'static (Tokenizer, usize) {
    static TOKENIZER: OnceLock<(Tokenizer, usize)> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let options = FixtureOptions {
            size: Size::Tiny,
            arch: Arch::Qwen2,
            dtype: Dtype::F32,
            quantize: None,
            format: Format::Safetensors,
        };
        let summary = corral_fixture::generate(&options, dir.path()).unwrap();
        let tokenizer = Tokenizer::from_file(dir.path().join("tokenizer.json")).unwrap();
        (tokenizer, summary.vocab_size)
    })
}

/// The fixture: byte-level BPE, ChatML special tokens, generation ending at `<|im_end|>` or
/// `<|endoftext|>`. Its logits are as long as its embedding.
fn fixture() -> Model {
    let (tokenizer, n_vocab) = fixture_tokenizer();
    let eos = ["<|im_end|>", "<|endoftext|>"]
        .map(|token| tokenizer.token_to_id(token).unwrap())
        .into();
    Model::new(tokenizer.clone(), *n_vocab, eos)
}

/// Pieces of the SentencePiece vocabulary beyond single characters, each merged left to right.
const WORDS: [&str; 14] = [
    "{\"",
    "\":",
    "\",",
    "\"}",
    "▁\"",
    "name",
    "arguments",
    "city",
    "unit",
    "▁the",
    "▁hello",
    "true",
    "false",
    "null",
];

/// A Llama-style SentencePiece tokenizer: `▁` for spaces (one prepended to the text), byte
/// fallback through `<0xNN>`, control tokens matched whole. Ends at `</s>`.
fn sentencepiece() -> Model {
    let mut pieces: Vec<String> = ["<unk>", "<s>", "</s>", "[TOOL_CALLS]"]
        .map(String::from)
        .into();
    pieces.extend((0..=255u8).map(|byte| format!("<0x{byte:02X}>")));
    pieces.push("▁".into());
    pieces.extend(('!'..='~').map(String::from));
    let mut merges = Vec::new();
    for word in WORDS {
        let chars: Vec<char> = word.chars().collect();
        let mut left = chars[0].to_string();
        for c in &chars[1..] {
            let merged = format!("{left}{c}");
            merges.push((left.clone(), c.to_string()));
            if !pieces.contains(&merged) {
                pieces.push(merged.clone());
            }
            left = merged;
        }
    }
    let mut vocab = Vocab::default();
    for (id, piece) in pieces.iter().enumerate() {
        vocab.entry(piece.clone()).or_insert(id as u32);
    }
    let model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true)
        .unk_token("<unk>".into())
        .build()
        .unwrap();
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_normalizer(Some(NormalizerSequence::new(vec![
        Prepend::new("▁".into()).into(),
        Replace::new(" ", "▁").unwrap().into(),
    ])));
    tokenizer.with_decoder(Some(DecoderSequence::new(vec![
        Replace::new("▁", " ").unwrap().into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
        Strip::new(' ', 1, 0).into(),
    ])));
    let control =
        ["<unk>", "<s>", "</s>", "[TOOL_CALLS]"].map(|token| AddedToken::from(token, true));
    tokenizer.add_special_tokens(&control);
    let n_vocab = pieces.len();
    Model::new(tokenizer, n_vocab, [2].into())
}

/// splitmix64: a seeded stream of logits, the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn logit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// What one constrained generation produced.
struct Generated {
    tokens: Vec<u32>,
    text: String,
    /// An end-of-generation token was drawn (rather than the grammar completing by itself).
    ended_by_eos: bool,
}

/// Generates under `spec` with seed `seed` until the grammar finishes or an end-of-generation
/// token is drawn; panics if neither happens within `MAX_TOKENS`.
fn generate(model: &Model, spec: &GrammarSpec, seed: u64) -> Generated {
    let mut constraint = Constraint::compile(&model.factory, spec).unwrap();
    let mut rng = Rng(seed);
    let mut logits = vec![0.0f32; model.factory.n_vocab()];
    let mut tokens = Vec::new();
    let mut ended_by_eos = false;
    while !constraint.is_finished() {
        assert!(
            tokens.len() < MAX_TOKENS,
            "no end after {MAX_TOKENS} tokens"
        );
        logits.iter_mut().for_each(|logit| *logit = rng.logit());
        constraint.mask(&mut logits).unwrap();
        let token = argmax(&logits);
        if model.eos.contains(&token) {
            ended_by_eos = true;
            break;
        }
        constraint.accept(token).unwrap();
        tokens.push(token);
    }
    let text = model.tokenizer.decode(&tokens, false).unwrap();
    Generated {
        tokens,
        text,
        ended_by_eos,
    }
}

fn argmax(logits: &[f32]) -> u32 {
    let (index, best) = logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap();
    assert!(best.is_finite(), "the mask allowed no token");
    index as u32
}

/// The error `spec` is refused with.
fn refusal(model: &Model, spec: &GrammarSpec) -> String {
    match Constraint::compile(&model.factory, spec) {
        Ok(_) => panic!("{spec:?} compiled"),
        Err(ConstraintError::Invalid(message)) => message,
        Err(other) => panic!("{spec:?} refused with {other:?}"),
    }
}
