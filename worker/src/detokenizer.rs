//! Incremental detokenization: token ids in, text deltas out.
//!
//! Decoding each token on its own gives wrong text for two reasons: byte-level BPE and byte
//! fallback split a multi-byte character over several tokens (alone, each decodes to U+FFFD),
//! and SentencePiece-style decoders render a token differently at the start of a text (the
//! leading space is stripped). So each step decodes a short window of recent tokens twice, with
//! and without the unread ones, and emits the difference; while that difference ends in U+FFFD
//! the character is incomplete and the tokens stay unread. This is the prefix/read offset
//! technique of text-generation-inference and vLLM.
//!
//! The window is the last emitted chunk (context for the decoder) plus the unread tokens, and
//! older tokens are dropped, so a step costs the same at token 10 and at token 100,000; the
//! limits on how long tokens may stay unread keep it bounded whatever the model emits.
//!
//! Special tokens are skipped, except those a caller asks to keep: some models write tool-call
//! markers as special tokens (Mistral's `[TOOL_CALLS]`, Llama's `<|python_tag|>`), and the
//! output parser needs to see them. A kept token flushes what is pending and then comes out as
//! its literal text, so text and markers keep their order.

use std::collections::HashSet;
use std::sync::Arc;

use tokenizers::Tokenizer;

/// A UTF-8 character is at most 4 bytes, so a genuinely incomplete one is never still pending
/// after 4 tokens; past that the U+FFFD is part of the output (the model produced invalid
/// bytes) and holding it back any longer would only stall the stream.
const MAX_INCOMPLETE: usize = 4;

/// Tokens that add no text (skipped special tokens) stay unread, so that the next real token is
/// still decoded after real text and keeps its leading space; this bounds how many.
const MAX_SILENT: usize = 16;

#[derive(Debug, thiserror::Error)]
#[error("cannot decode token ids {ids:?}")]
pub struct DetokenizeError {
    ids: Vec<u32>,
    #[source]
    source: tokenizers::Error,
}

/// One sequence's detokenizer; special tokens are skipped, as `decode(ids, true)` does, except
/// the kept ones.
pub struct Detokenizer {
    tokenizer: Arc<Tokenizer>,
    kept: HashSet<u32>,
    /// Recent tokens: `[..read]` was already emitted and is kept as decoding context,
    /// `[read..]` is not emitted yet.
    window: Vec<u32>,
    read: usize,
}

impl Detokenizer {
    pub fn new(tokenizer: Arc<Tokenizer>) -> Self {
        Self {
            tokenizer,
            kept: HashSet::new(),
            window: Vec::new(),
            read: 0,
        }
    }

    /// Special tokens to emit as their literal text rather than skip.
    pub fn keep_tokens(mut self, ids: impl IntoIterator<Item = u32>) -> Self {
        self.kept.extend(ids);
        self
    }

    /// Adds one generated token and returns the text it completes, possibly empty.
    pub fn push(&mut self, token: u32) -> Result<String, DetokenizeError> {
        if self.kept.contains(&token) {
            return self.push_kept(token);
        }
        self.window.push(token);
        let (prefix, full) = self.decode_window()?;
        let pending = self.window.len() - self.read;
        let delta = suffix_after(&full, prefix.len()).to_owned();
        let incomplete = full.ends_with('\u{FFFD}') && pending < MAX_INCOMPLETE;
        let silent = delta.is_empty() && pending < MAX_SILENT;
        if incomplete || silent {
            return Ok(String::new());
        }
        // The unread tokens become the next step's context; older context is no longer needed.
        self.window.drain(..self.read);
        self.read = self.window.len();
        Ok(delta)
    }

    /// Returns whatever is still held back, at the end of generation: an incomplete character
    /// at the very end comes out as U+FFFD, as a full decode would show it.
    pub fn finish(&mut self) -> Result<String, DetokenizeError> {
        let (prefix, full) = self.decode_window()?;
        self.window.clear();
        self.read = 0;
        Ok(suffix_after(&full, prefix.len()).to_owned())
    }

    /// Whatever is pending, then the token's text. The token itself never enters the window:
    /// decoding would skip it anyway, and leaving it out keeps the text before it as the next
    /// token's context, so that token keeps its leading space.
    fn push_kept(&mut self, token: u32) -> Result<String, DetokenizeError> {
        let (prefix, full) = self.decode_window()?;
        let mut text = suffix_after(&full, prefix.len()).to_owned();
        text.push_str(&self.tokenizer.id_to_token(token).unwrap_or_default());
        if self.read < self.window.len() {
            self.window.drain(..self.read);
            self.read = self.window.len();
        }
        Ok(text)
    }

    /// The text of the emitted context alone, and of the whole window.
    fn decode_window(&self) -> Result<(String, String), DetokenizeError> {
        let decode = |ids: &[u32]| {
            self.tokenizer
                .decode(ids, true)
                .map_err(|source| DetokenizeError {
                    ids: ids.to_vec(),
                    source,
                })
        };
        Ok((decode(&self.window[..self.read])?, decode(&self.window)?))
    }
}

/// `full` past the first `len` bytes. Normally the context's text is an exact prefix of the
/// window's; a decoder that rewrites across the boundary would make `len` fall inside a
/// character, so it is moved back to the character's start instead of panicking.
fn suffix_after(full: &str, len: usize) -> &str {
    let start = (0..=len.min(full.len()))
        .rev()
        .find(|&i| full.is_char_boundary(i))
        .unwrap_or(0);
    &full[start..]
}

#[cfg(test)]
mod tests;
