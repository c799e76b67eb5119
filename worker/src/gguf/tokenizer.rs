//! The tokenizer a GGUF carries in its metadata, rebuilt as a Hugging Face `tokenizers` one.
//!
//! Three kinds, as llama.cpp names them in `tokenizer.ggml.model`:
//! - `gpt2`: byte-level BPE with the file's own merges; `tokenizer.ggml.pre` names the
//!   pre-tokenizer (the regex that splits text before merging), which each model family defines.
//! - `llama`: SentencePiece BPE with byte fallback. The file holds scores, not merges; the merges
//!   are every split of a piece into two pieces of the vocabulary, ranked by the piece's score, as
//!   transformers' converter derives them.
//! - `gemma4`: the same with the file's own merges, runs of newlines split from the rest first,
//!   and bos always added, as llama.cpp does.
//!
//! Control and user-defined tokens become added tokens, matched whole before any splitting, as
//! llama.cpp does with its special tokens.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::sequence::Sequence as PreTokenizerSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use super::header::{GgufError, GgufHeader, Value};

/// llama.cpp's token types.
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;

/// GPT-2's split: contractions, letters, numbers and other runs, each with one leading space.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3's split: contractions, letters with one leading non-letter, numbers of up to three
/// digits, punctuation runs, newlines, spaces.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: as Llama 3's, but every digit alone.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5's: as Qwen2's, with combining marks kept in words.
const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// o200k's (gpt-oss, GPT-4o, Llama 4), as llama.cpp adapts its tokenizer.json's: a word is its
/// letters other than a-z, then its letters other than A-Z (CamelCase splits), with a
/// contraction; numbers of up to three digits. Unlike the original, a combining mark is no
/// letter here, so it ends a word (llama.cpp's regex engine has no `\p{Lu}`/`\p{Ll}`).
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])*(?:(?=\p{L})[^A-Z])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])+(?:(?=\p{L})[^A-Z])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Mistral's tekken, as llama.cpp adapts it: o200k's words without contractions, every digit
/// alone.
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])*(?:(?=\p{L})[^A-Z])+|[^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])+(?:(?=\p{L})[^A-Z])*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// DeepSeek V3's last split, after numbers of up to three digits and runs of CJK ideographs and
/// kana: a punctuation mark joins the ASCII letters after it, a word its marks and one leading
/// non-letter, punctuation and symbol runs their newlines.
const DEEPSEEK3: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;

/// DeepSeek V2's (and DeepSeek LLM's) letters: Latin, Greek, Cyrillic, Armenian, Georgian,
/// Cherokee and other cased scripts, with one leading space.
const DEEPSEEK_LLM_LETTERS: &str = r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
/// DeepSeek V2's ASCII and full-width punctuation runs, with one leading space. Its range
/// `\u{3000}-。` starts at `、` here: llama.cpp makes every non-ASCII space a vertical tab
/// before these regexes run, so the ideographic space is only ever a space.
const DEEPSEEK_LLM_PUNCTUATION: &str = r"\s?[!-/:-~！-／：-～‘-‟、-。]+";
/// DeepSeek V2's CJK, Hangul and other runs from U+0800, spaces excepted (as above).
const DEEPSEEK_LLM_CJK: &str = r"(?:(?!\s)[一-龥ࠀ-一가-퟿])+";

/// Kimi K2's split as llama.cpp's own code makes it (`unicode_regex_split_custom_kimi_k2`), not
/// the tokenizer's regex: runs of Han ideographs (llama.cpp's blocks); then a word, its letters
/// other than Han with one leading non-letter and a contraction (unlike the original regex,
/// CamelCase stays whole and a combining mark ends the word); numbers of up to three digits;
/// punctuation runs; newlines; spaces.
const KIMI_K2: &str = r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2EBEF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]+|[^\r\n\p{L}\p{N}]?[^\P{L}\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2EBEF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How llama.cpp splits text for one family of `tokenizer.ggml.pre` names.
struct PreTokenizer {
    names: &'static [&'static str],
    /// Applied in turn, as llama.cpp's `regex_exprs`: each splits every piece the previous left,
    /// keeping what it matched and what lay between as pieces.
    splits: &'static [&'static str],
    /// A piece that is a token whole is that token, before any merge (llama.cpp's
    /// `ignore_merges`): it differs from merging where the merges do not reach a token.
    ignore_merges: bool,
    /// Whether bos is added when the file does not say (`tokenizer.ggml.add_bos_token`).
    add_bos: bool,
}

/// The pre-tokenizers served: llama.cpp's mapping of names to splits (llama-vocab.cpp), with the
/// tokenizer.json regexes its own engine rewrites.
const PRE_TOKENIZERS: [PreTokenizer; 13] = [
    PreTokenizer {
        names: &["default"],
        splits: &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &[
            "gpt-2",
            "gpt2",
            "phi-2",
            "olmo",
            "mpt",
            "jais",
            "exaone4",
            "trillion",
            "granite-docling",
        ],
        splits: &[GPT2],
        ignore_merges: false,
        add_bos: false,
    },
    // Granite 3 (`refact`) splits as SmolLM: digits alone, then GPT-2's regex.
    PreTokenizer {
        names: &[
            "smollm",
            "refact",
            "starcoder",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        splits: &[r"\p{N}", GPT2],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &[
            "llama-bpe",
            "llama3",
            "llama-v3",
            "pixtral",
            "falcon3",
            "falcon-h1",
            "lfm2",
        ],
        splits: &[LLAMA3],
        ignore_merges: true,
        add_bos: true,
    },
    PreTokenizer {
        names: &["glm4", "glm5"],
        splits: &[LLAMA3],
        ignore_merges: true,
        add_bos: false,
    },
    PreTokenizer {
        names: &["dbrx", "smaug-bpe", "chatglm-bpe"],
        splits: &[LLAMA3],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &[
            "qwen2",
            "deepseek-r1-qwen",
            "stablelm2",
            "megrez",
            "kormo",
            "f2llmv2",
            "grok-2",
            "hunyuan",
            "solar-open",
        ],
        splits: &[QWEN2],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["qwen35"],
        splits: &[QWEN35],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        splits: &[GPT4O],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["deepseek-v3"],
        splits: &[r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", DEEPSEEK3],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["deepseek-llm"],
        splits: &[
            r"[\r\n]",
            DEEPSEEK_LLM_LETTERS,
            DEEPSEEK_LLM_PUNCTUATION,
            r"\s+$",
            DEEPSEEK_LLM_CJK,
            r"\p{N}+",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["kimi-k2"],
        splits: &[KIMI_K2],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["tekken"],
        splits: &[TEKKEN],
        ignore_merges: true,
        add_bos: true,
    },
];

/// Every `tokenizer.ggml.pre` name served.
pub fn pre_tokenizer_names() -> impl Iterator<Item = &'static str> {
    PRE_TOKENIZERS
        .iter()
        .flat_map(|pre| pre.names.iter().copied())
}

pub fn build(header: &GgufHeader) -> Result<Tokenizer, GgufError> {
    let tokens = strings(header, "tokenizer.ggml.tokens")?
        .ok_or_else(|| header.invalid("no tokenizer.ggml.tokens"))?;
    let kind = header.string("tokenizer.ggml.model").unwrap_or("gpt2");
    // SentencePiece adds bos unless the file says not to; byte-level BPE as its pre-tokenizer.
    let (mut tokenizer, add_bos) = match kind {
        "gpt2" => byte_level_bpe(header, &tokens)?,
        "llama" => {
            let merges = merges_from_scores(header, &tokens)?;
            (sentencepiece_bpe(header, &tokens, merges, false)?, true)
        }
        "gemma4" => {
            let merges = file_merges(header)?;
            (sentencepiece_bpe(header, &tokens, merges, true)?, true)
        }
        other => {
            return Err(header.invalid(format!(
                "tokenizer.ggml.model {other:?} is not served (supported: gpt2, llama, gemma4)"
            )));
        }
    };
    let types = integers(header, "tokenizer.ggml.token_type")?.unwrap_or_default();
    let added: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(_, kind)| matches!(**kind, TYPE_CONTROL | TYPE_USER_DEFINED))
        .map(|(token, kind)| AddedToken::from(token.clone(), *kind == TYPE_CONTROL))
        .collect();
    // Ids come from the vocabulary, where these tokens already are: adding them only makes them
    // match whole.
    tokenizer.add_special_tokens(&added);
    // llama.cpp adds bos to Gemma 4's prompts even where the file says not to.
    let add_bos = kind == "gemma4"
        || header
            .get("tokenizer.ggml.add_bos_token")
            .and_then(Value::as_bool)
            .unwrap_or(add_bos);
    let bos = special_id(header, "bos")?;
    if let (true, Some(bos)) = (add_bos, bos) {
        let text = tokens.get(bos as usize).ok_or_else(|| {
            header.invalid(format!("bos token id {bos} is not in the vocabulary"))
        })?;
        let processor = TemplateProcessing::builder()
            .try_single(format!("{text} $A"))
            .and_then(|builder| builder.try_pair(format!("{text} $A {text} $B")))
            .map_err(|error| header.invalid(format!("bos token {text:?}: {error}")))?
            .special_tokens(vec![(text.clone(), bos)])
            .build()
            .map_err(|error| header.invalid(format!("bos token {text:?}: {error}")))?;
        tokenizer.with_post_processor(Some(processor));
    }
    Ok(tokenizer)
}

/// `tokenizer.ggml.<name>_token_id`.
pub fn special_id(header: &GgufHeader, name: &str) -> Result<Option<u32>, GgufError> {
    let key = format!("tokenizer.ggml.{name}_token_id");
    match header.get(&key) {
        None => Ok(None),
        Some(value) => value
            .as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .map(Some)
            .ok_or_else(|| header.invalid(format!("{key} is {value:?}"))),
    }
}

/// The tokenizer, and whether its pre-tokenizer adds bos when the file does not say.
fn byte_level_bpe(header: &GgufHeader, tokens: &[String]) -> Result<(Tokenizer, bool), GgufError> {
    let merges = file_merges(header)?;
    let name = header.string("tokenizer.ggml.pre").unwrap_or("default");
    let pre = PRE_TOKENIZERS
        .iter()
        .find(|pre| pre.names.contains(&name))
        .ok_or_else(|| {
            header.invalid(format!(
                "pre-tokenizer {name:?} (tokenizer.ggml.pre) is not served (supported: {})",
                pre_tokenizer_names().collect::<Vec<_>>().join(", ")
            ))
        })?;
    let model = BPE::builder()
        .vocab_and_merges(vocabulary(tokens), merges)
        .ignore_merges(pre.ignore_merges)
        .build()
        .map_err(|error| header.invalid(format!("building the BPE tokenizer: {error}")))?;
    let mut tokenizer = Tokenizer::new(model);
    let mut steps = pre
        .splits
        .iter()
        .map(|pattern| {
            Split::new(
                SplitPattern::Regex((*pattern).to_owned()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map(Into::into)
            .map_err(|error| header.invalid(format!("pre-tokenizer {name}: {error}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Bytes are mapped to GPT-2's characters after the split, as llama.cpp does.
    let bytes_only = ByteLevel::new(false, true, false);
    steps.push(bytes_only.into());
    tokenizer.with_pre_tokenizer(Some(PreTokenizerSequence::new(steps)));
    tokenizer
        .with_post_processor(Some(bytes_only))
        .with_decoder(Some(bytes_only));
    Ok((tokenizer, pre.add_bos))
}

/// SentencePiece's merges, derived from the pieces' scores.
fn merges_from_scores(header: &GgufHeader, tokens: &[String]) -> Result<Merges, GgufError> {
    let scores = floats(header, "tokenizer.ggml.scores")?
        .ok_or_else(|| header.invalid("a llama tokenizer without tokenizer.ggml.scores"))?;
    let vocab = vocabulary(tokens);
    let mut merges: Vec<(f64, u32, u32, u32)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        for (split, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(split);
            if let (Some(&left), Some(&right)) = (vocab.get(left), vocab.get(right)) {
                let score = scores.get(id).copied().unwrap_or(0.0);
                merges.push((score, id as u32, left, right));
            }
        }
    }
    // Higher score merges first; ties in id order, so the result does not depend on hashing.
    merges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let merges: Merges = merges
        .into_iter()
        .map(|(_, _, left, right)| {
            (
                tokens[left as usize].clone(),
                tokens[right as usize].clone(),
            )
        })
        .collect();
    Ok(merges)
}

/// `tokenizer.ggml.merges`, two pieces a space apart (byte-level pieces spell a space as `Ġ`,
/// SentencePiece pieces as `▁`, so the one space separates the pair).
fn file_merges(header: &GgufHeader) -> Result<Merges, GgufError> {
    let kind = header.string("tokenizer.ggml.model").unwrap_or("gpt2");
    strings(header, "tokenizer.ggml.merges")?
        .ok_or_else(|| header.invalid(format!("a {kind} tokenizer without tokenizer.ggml.merges")))?
        .iter()
        .map(|merge| {
            merge
                .split_once(' ')
                .map(|(left, right)| (left.to_owned(), right.to_owned()))
                .ok_or_else(|| header.invalid(format!("merge {merge:?} is not two tokens")))
        })
        .collect()
}

/// SentencePiece-style BPE with byte fallback over `merges`: spaces as `▁`, and with `newlines`
/// (Gemma 4) the text split into runs of newlines and of the rest before merging, as llama.cpp's
/// `gemma4` pre-tokenizer does.
fn sentencepiece_bpe(
    header: &GgufHeader,
    tokens: &[String],
    merges: Merges,
    newlines: bool,
) -> Result<Tokenizer, GgufError> {
    let vocab = vocabulary(tokens);
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = special_id(header, "unknown")?.and_then(|id| tokens.get(id as usize)) {
        builder = builder.unk_token(unk.clone());
    }
    let model = builder.build().map_err(|error| {
        header.invalid(format!("building the SentencePiece tokenizer: {error}"))
    })?;
    let mut tokenizer = Tokenizer::new(model);
    let space = |error| header.invalid(format!("SentencePiece normalizer: {error}"));
    let replace_space = Replace::new(" ", "▁").map_err(space)?;
    let add_prefix = header
        .get("tokenizer.ggml.add_space_prefix")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let normalizer = if add_prefix {
        NormalizerSequence::new(vec![Prepend::new("▁".into()).into(), replace_space.into()])
    } else {
        NormalizerSequence::new(vec![replace_space.into()])
    };
    tokenizer.with_normalizer(Some(normalizer));
    if newlines {
        let split = Split::new(
            SplitPattern::Regex("[^\\n]+|[\\n]+".to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|error| header.invalid(format!("gemma4 pre-tokenizer: {error}")))?;
        tokenizer.with_pre_tokenizer(Some(split));
    }
    let mut decoders = vec![
        Replace::new("▁", " ").map_err(space)?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    tokenizer.with_decoder(Some(DecoderSequence::new(decoders)));
    Ok(tokenizer)
}

/// Token text → id; the first of duplicate texts keeps its id, as in llama.cpp.
fn vocabulary(tokens: &[String]) -> Vocab {
    let mut vocab = Vocab::default();
    for (id, token) in tokens.iter().enumerate() {
        vocab.entry(token.clone()).or_insert(id as u32);
    }
    vocab
}

/// The array at `key` with each element converted by `element`, or `None` when the key is absent;
/// an element `element` refuses is an error naming the key and `what` it should have been.
fn list<T>(
    header: &GgufHeader,
    key: &str,
    what: &str,
    element: impl Fn(&Value) -> Option<T>,
) -> Result<Option<Vec<T>>, GgufError> {
    let Some(value) = header.get(key) else {
        return Ok(None);
    };
    let values = value
        .as_array()
        .ok_or_else(|| header.invalid(format!("{key} is not an array")))?;
    values
        .iter()
        .map(element)
        .collect::<Option<Vec<_>>>()
        .map(Some)
        .ok_or_else(|| header.invalid(format!("{key} holds a value that is not {what}")))
}

fn strings(header: &GgufHeader, key: &str) -> Result<Option<Vec<String>>, GgufError> {
    list(header, key, "a string", |value| {
        value.as_str().map(str::to_owned)
    })
}

fn integers(header: &GgufHeader, key: &str) -> Result<Option<Vec<i64>>, GgufError> {
    list(header, key, "an integer", |value| match value {
        Value::Int(int) => Some(*int),
        Value::Uint(uint) => i64::try_from(*uint).ok(),
        _ => None,
    })
}

fn floats(header: &GgufHeader, key: &str) -> Result<Option<Vec<f64>>, GgufError> {
    list(header, key, "a number", Value::as_f64)
}

/// Control tokens that end a turn in the chat formats of the families served. A GGUF names one
/// eos id, but a ChatML model ends its turns with `<|im_end|>` and its documents with
/// `<|endoftext|>`: generation stops at any of them, as llama.cpp's end-of-generation set does.
const END_OF_GENERATION: [&str; 6] = [
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "</s>",
];

/// Ids that end a generation: eos, end-of-turn, end-of-message, and the control tokens above.
pub fn stop_ids(header: &GgufHeader) -> Result<Vec<u32>, GgufError> {
    let mut ids = Vec::new();
    for name in ["eos", "eot", "eom"] {
        ids.extend(special_id(header, name)?);
    }
    let tokens = strings(header, "tokenizer.ggml.tokens")?.unwrap_or_default();
    let types = integers(header, "tokenizer.ggml.token_type")?.unwrap_or_default();
    for (id, (token, kind)) in tokens.iter().zip(&types).enumerate() {
        if *kind == TYPE_CONTROL && END_OF_GENERATION.contains(&token.as_str()) {
            ids.push(id as u32);
        }
    }
    Ok(ids)
}

/// The text of the bos and eos tokens, for chat templates that print them.
pub fn special_texts(
    header: &GgufHeader,
    tokenizer: &Tokenizer,
) -> Result<(Option<String>, Option<String>), GgufError> {
    let text = |name| -> Result<Option<String>, GgufError> {
        Ok(special_id(header, name)?.and_then(|id| tokenizer.id_to_token(id)))
    };
    Ok((text("bos")?, text("eos")?))
}
