//! Guesses from the model's own multi-token-prediction layer (`speculative = "mtp"`: DeepSeek
//! V3's and GLM-4.5's next-n layer, where the checkpoint kept it). After every pass the layer
//! reads, for each position the model confirmed, the model's hidden state there beside the token
//! after it, into a cache of its own, so it always holds the sequence's pairs up to its newest
//! token; its last row then drafts the token after that one, and each further guess runs the
//! layer once more on the guess beside the layer's own last output (as vLLM chains one layer),
//! entries its cache forgets at once, as no later pair is ever one of them.
//!
//! Positions restored from the prefix cache come without the model's hidden states, so the layer
//! reads from the first position the sequence computes; its guesses then see less of the
//! conversation, which costs acceptance, never a token.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::{IndexOp, argmax_axis};

use crate::model::{KvCache, Model};

/// A sequence's multi-token-prediction layer state.
pub struct MtpState {
    cache: KvCache,
    /// The layer's output at the newest pair it read: what drafts the next token.
    last: Option<Array>,
}

impl MtpState {
    pub fn new(cache: KvCache) -> Self {
        Self { cache, last: None }
    }

    /// Reads the pairs of a pass: the model's hidden states at consecutive confirmed positions,
    /// rows of the pass's `hidden` from `first_row` on, beside `next_tokens`, the token after
    /// each.
    pub fn read(
        &mut self,
        model: &Model,
        hidden: &Array,
        first_row: i32,
        next_tokens: &[u32],
    ) -> Result<(), Exception> {
        if next_tokens.is_empty() {
            return Ok(());
        }
        let rows = hidden.index((.., first_row..first_row + next_tokens.len() as i32, ..));
        let output = model.mtp_hidden_states(next_tokens, &rows, &mut self.cache)?;
        self.last = Some(output.index((.., -1.., ..)));
        Ok(())
    }

    /// Up to `count` guesses for the tokens after the newest one read.
    pub fn guess(&mut self, model: &Model, count: usize) -> Result<Vec<u32>, Exception> {
        let Some(mut last) = self.last.clone() else {
            return Ok(Vec::new());
        };
        let mut guesses = Vec::with_capacity(count);
        for _ in 0..count {
            let token = argmax_axis(&model.logits(&last)?, -1, false)?;
            token.eval()?;
            let token = token.as_slice::<u32>()[0];
            guesses.push(token);
            if guesses.len() == count {
                break;
            }
            last = model.mtp_hidden_states(&[token], &last, &mut self.cache)?;
        }
        // The chained entries are no pair of the sequence's.
        self.cache.forget_last(guesses.len() as i32 - 1)?;
        Ok(guesses)
    }
}
