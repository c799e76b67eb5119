//! Speculative decoding: a decoding sequence's pass carries, after its last token, tokens
//! guessed for the ones after it, and the pass's logits at each of them check the guesses; every
//! guess the sequence would have sampled anyway saves a pass.
//!
//! The guesses come from the conversation itself (`ngram`: prompt lookup, no extra weights):
//! agents re-emit the code and tool arguments they have just read. Checking samples each row as
//! plain decoding would, with the same sampler, grammar, penalties and random draws, and stops
//! at the first row whose token is not the guess, so the output is token for token what plain
//! decoding gives, greedy or seeded, and its distribution the model's: a guess drawn from no
//! distribution is accepted exactly when the model samples it.

/// How a model's sequences draft (`corral-worker serve --speculative`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    #[default]
    Off,
    Ngram,
}

impl Method {
    pub const NAMES: [&'static str; 2] = ["off", "ngram"];

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "off" => Some(Self::Off),
            "ngram" => Some(Self::Ngram),
            _ => None,
        }
    }
}

/// A model's speculation: the method and the most tokens a sequence guesses per pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Speculation {
    pub method: Method,
    pub draft_tokens: usize,
}

/// Tokens guessed per pass where the operator sets none: llama.cpp's and vLLM's prompt lookup
/// default to a handful.
pub const DEFAULT_DRAFT_TOKENS: usize = 4;

impl Default for Speculation {
    fn default() -> Self {
        Self {
            method: Method::Off,
            draft_tokens: DEFAULT_DRAFT_TOKENS,
        }
    }
}

/// The longest and shortest run of last tokens looked up.
const LONGEST_NGRAM: usize = 3;
const SHORTEST_NGRAM: usize = 2;

/// Prompt lookup: the tokens that followed the latest earlier occurrence of `history`'s last
/// few tokens (the longest run that occurred before, of 3 down to 2), at most `count` of them.
pub fn ngram_draft(history: &[u32], count: usize) -> &[u32] {
    for length in (SHORTEST_NGRAM..=LONGEST_NGRAM).rev() {
        let Some(start) = history.len().checked_sub(length) else {
            continue;
        };
        let tail = &history[start..];
        // The latest occurrence that has a token after it, which the tail itself has not.
        let found = history[..history.len() - 1]
            .windows(length)
            .rposition(|window| window == tail);
        if let Some(position) = found {
            let from = position + length;
            return &history[from..(from + count).min(history.len())];
        }
    }
    &[]
}

#[cfg(test)]
mod tests;
