//! Decoder embedding models and decoder rerankers over the worker's causal language model.
//!
//! Embeddings (Qwen3-Embedding style): each input runs through the decoder on a fresh cache,
//! several inputs packed into one pass; the vector is the final hidden state at the input's last
//! token (its tokenizer appends the end-of-text token there), normalized when the layout says.
//!
//! Reranking (Qwen3-Reranker style): each query-document pair is written into the model's
//! judging prompt, and the score is p("yes") against p("no") from the logits at the prompt's
//! last position: softmax over those two logits, so scores lie in [0, 1].

use mlx_rs::error::Exception;
use mlx_rs::ops;
use mlx_rs::{Array, Dtype};
use tokenizers::Tokenizer;

use crate::model::{Model, Segment};

use super::batcher::Item;

/// Qwen3-Reranker's judging prompt, around the instruction, query and document.
const RERANK_PREFIX: &str = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";
const RERANK_SUFFIX: &str = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
/// The instruction Qwen3-Reranker was evaluated with when none is given.
const DEFAULT_INSTRUCTION: &str =
    "Given a web search query, retrieve relevant passages that answer the query";

/// The prompt a decoder reranker judges for one query-document pair, in three parts: what
/// comes before the document, the document, and what follows it (so that truncation can cut the
/// document alone and keep the question that ends the prompt).
pub fn rerank_prompt<'a>(query: &str, document: &'a str) -> [std::borrow::Cow<'a, str>; 3] {
    [
        format!("{RERANK_PREFIX}<Instruct>: {DEFAULT_INSTRUCTION}\n<Query>: {query}\n<Document>: ")
            .into(),
        document.into(),
        RERANK_SUFFIX.into(),
    ]
}

/// The ids of the answers a decoder reranker chooses between.
#[derive(Debug, Clone, Copy)]
pub struct YesNo {
    yes: u32,
    no: u32,
}

impl YesNo {
    /// The vocabulary's "yes" and "no" tokens (Qwen's have both); where a word is several
    /// tokens, its first token stands for it, the token that starts the answer.
    pub fn find(tokenizer: &Tokenizer) -> Option<Self> {
        let first_token = |word: &str| {
            tokenizer.token_to_id(word).or_else(|| {
                let encoding = tokenizer.encode(word, false).ok()?;
                encoding.get_ids().first().copied()
            })
        };
        let (yes, no) = (first_token("yes")?, first_token("no")?);
        (yes != no).then_some(Self { yes, no })
    }
}

/// The final hidden state at each item's last token: `[rows, hidden]`.
fn last_hidden(model: &Model, items: &[&Item]) -> Result<Array, Exception> {
    let mut caches: Vec<_> = items.iter().map(|_| model.new_cache()).collect();
    let mut segments: Vec<Segment<'_>> = items
        .iter()
        .zip(caches.iter_mut())
        .map(|(item, cache)| Segment {
            tokens: &item.ids,
            cache,
            embedded: Vec::new(),
        })
        .collect();
    let hidden = model.packed_hidden_states(&mut segments)?;
    let mut end = 0i32;
    let last: Vec<i32> = items
        .iter()
        .map(|item| {
            end += item.ids.len() as i32;
            end - 1
        })
        .collect();
    let rows = last.len() as i32;
    hidden
        .take_axis(Array::from_slice(&last, &[rows]), 1)?
        .reshape(&[rows, -1])
}

/// `[rows, hidden]` in f32: each item's last-token vector.
pub fn embed(model: &Model, items: &[&Item]) -> Result<Array, Exception> {
    last_hidden(model, items)?.as_dtype(Dtype::Float32)
}

/// `[rows]` in f32: each prompt's p("yes") against p("no").
pub fn judge(model: &Model, items: &[&Item], answers: YesNo) -> Result<Array, Exception> {
    let logits = model.logits(&last_hidden(model, items)?)?;
    let pair = Array::from_slice(&[answers.no, answers.yes], &[2]);
    let chosen = logits.take_axis(&pair, -1)?.as_dtype(Dtype::Float32)?;
    ops::softmax_axis(&chosen, -1, None)?.take_axis(Array::from_int(1), -1)
}
