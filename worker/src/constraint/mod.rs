//! Constrained decoding with llguidance: a token mask applied to the logits before sampling.
//!
//! A `ConstraintFactory` is built once per model (`vocabulary.rs`: every token id as the bytes it
//! stands for). A request's `GrammarSpec` (`grammar.rs`, tool calls in `tool_grammar.rs`, the
//! JSON both write in `json_options.rs`) is compiled into a `Constraint` before any model
//! compute, so a refused schema or grammar is a client error that costs no prefill. Each step the constraint masks the logits, the sampler
//! draws among the tokens left, and the token drawn is fed back with `accept`.
//!
//! llguidance bounds its own work: the parser limits (lexer fuel, Earley items per step, lexer
//! states, grammar size) turn a pathological grammar into an error instead of a stalled engine
//! thread, and a panic inside the matcher comes back as an error too.

mod grammar;
mod json_options;
mod tool_grammar;
mod vocabulary;

use llguidance::Matcher;
use llguidance::api::StopReason;
use llguidance::toktrie::SimpleVob;

pub use grammar::GrammarSpec;
pub use tool_grammar::ToolCallChoice;
pub use vocabulary::ConstraintFactory;

#[derive(Debug, thiserror::Error)]
pub enum ConstraintError {
    /// The model's tokenizer cannot be described to llguidance; constraints are unavailable.
    #[error("constrained decoding is not available for this model: {0}")]
    Vocabulary(String),
    /// The request's schema, grammar or tools were refused; the message names the part.
    #[error("{0}")]
    Invalid(String),
    /// The matcher failed mid-generation (a token the mask did not allow, a limit hit).
    #[error("constrained decoding failed: {0}")]
    Matcher(String),
    #[error("logits have {got} entries, the constrained vocabulary {expected}")]
    LogitsLength { got: usize, expected: usize },
}

/// One request's grammar state.
pub struct Constraint {
    matcher: Matcher,
    n_vocab: usize,
}

impl Constraint {
    pub fn compile(
        factory: &ConstraintFactory,
        spec: &GrammarSpec,
    ) -> Result<Self, ConstraintError> {
        let parser = grammar::compile(factory, spec)?;
        Ok(Self {
            matcher: Matcher::new(Ok(parser)),
            n_vocab: factory.n_vocab(),
        })
    }

    /// Sets every token the grammar does not allow next to negative infinity. Once the grammar
    /// is complete only the end-of-generation tokens stay allowed.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), ConstraintError> {
        if logits.len() != self.n_vocab {
            return Err(ConstraintError::LogitsLength {
                got: logits.len(),
                expected: self.n_vocab,
            });
        }
        let allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|error| ConstraintError::Matcher(format!("{error:#}")))?;
        apply(&allowed, logits);
        Ok(())
    }

    pub fn accept(&mut self, token: u32) -> Result<(), ConstraintError> {
        if token as usize >= self.n_vocab {
            return Err(ConstraintError::Matcher(format!(
                "token {token} is past the vocabulary ({} tokens)",
                self.n_vocab
            )));
        }
        self.matcher
            .consume_token(token)
            .map_err(|error| ConstraintError::Matcher(format!("{error:#}")))
    }

    /// How many of `tokens`, in order from the present state, the grammar allows: a guessed
    /// continuation is cut at the first it forbids. The state is left as it was; a matcher
    /// error allows none, and the next `mask` reports it.
    pub fn allowed_prefix(&mut self, tokens: &[u32]) -> usize {
        self.matcher.validate_tokens(tokens).unwrap_or(0)
    }

    /// The grammar is complete and cannot take more tokens (or an end-of-generation token was
    /// accepted): generation ends with "stop".
    pub fn is_finished(&self) -> bool {
        matches!(
            self.matcher.stop_reason(),
            StopReason::NoExtension | StopReason::NoExtensionBias | StopReason::EndOfSentence
        )
    }
}

/// Word by word over the mask's bits: a full word leaves 32 logits alone, an empty one clears
/// them in one fill, so a typical mask (mostly one or the other) costs a pass over its words.
fn apply(allowed: &SimpleVob, logits: &mut [f32]) {
    for (chunk, &word) in logits.chunks_mut(32).zip(allowed.as_slice()) {
        match word {
            u32::MAX => {}
            0 => chunk.fill(f32::NEG_INFINITY),
            _ => {
                for (bit, logit) in chunk.iter_mut().enumerate() {
                    if word & (1 << bit) == 0 {
                        *logit = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
