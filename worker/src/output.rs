//! From sampled tokens to the answer a client reads: detokenize, match stop strings, then split
//! the text into content, reasoning and whole tool calls in the model's own format.
//!
//! The order matters: stop strings apply to what the model wrote (a stop string inside a call
//! ends the answer there), and the parser sees exactly the text a client would otherwise get.

use std::sync::Arc;

use corral_ipc::ToolCall;
use tokenizers::Tokenizer;

use crate::detokenizer::{DetokenizeError, Detokenizer};
use crate::stop_strings::StopStrings;
use crate::tools::{Fragment, OutputParser};

/// What one step adds to the answer.
#[derive(Debug, Default, PartialEq)]
pub struct Parts {
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
}

impl Parts {
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.reasoning.is_empty() && self.tool_calls.is_empty()
    }
}

/// One sequence's output side.
pub struct Output {
    detokenizer: Detokenizer,
    stops: StopStrings,
    /// `None` for a text completion: its output is all text.
    parser: Option<OutputParser>,
    calls: u32,
    malformed_logged: bool,
}

/// What a token did to the answer.
pub struct Step {
    pub parts: Parts,
    /// A stop string matched: the answer ends here.
    pub stopped: bool,
}

impl Output {
    pub fn new(
        tokenizer: Arc<Tokenizer>,
        kept_tokens: &[u32],
        stop: &[String],
        parser: Option<OutputParser>,
    ) -> Self {
        Self {
            detokenizer: Detokenizer::new(tokenizer).keep_tokens(kept_tokens.iter().copied()),
            stops: StopStrings::new(stop.iter().cloned()),
            parser,
            calls: 0,
            malformed_logged: false,
        }
    }

    /// The stop string that ended the answer, if one did.
    pub fn stop_sequence(&self) -> Option<&str> {
        self.stops.matched()
    }

    /// Whether the model is still thinking, as far as its output has been read.
    pub fn in_reasoning(&self) -> bool {
        self.parser.as_ref().is_some_and(OutputParser::is_reasoning)
    }

    /// How many tool calls the answer has made so far.
    pub fn calls(&self) -> u32 {
        self.calls
    }

    pub fn push(&mut self, token: u32) -> Result<Step, DetokenizeError> {
        let text = self.detokenizer.push(token)?;
        let outcome = self.stops.push(&text);
        let parts = self.parse(&outcome.emit, false);
        Ok(Step {
            parts,
            stopped: outcome.stopped,
        })
    }

    /// Everything still held back, at the end of the answer (not after a cancellation: nobody
    /// reads it then).
    pub fn finish(&mut self) -> Result<Parts, DetokenizeError> {
        let tail = self.detokenizer.finish()?;
        // Both give nothing more once a stop string has matched.
        let outcome = self.stops.push(&tail);
        let mut text = outcome.emit;
        if !outcome.stopped {
            text.push_str(&self.stops.finish());
        }
        Ok(self.parse(&text, true))
    }

    fn parse(&mut self, text: &str, last: bool) -> Parts {
        let Some(parser) = self.parser.as_mut() else {
            return Parts {
                text: text.to_owned(),
                ..Parts::default()
            };
        };
        let mut fragments = parser.push(text);
        if last {
            fragments.extend(parser.finish());
        }
        if let Some(reason) = parser.malformed()
            && !self.malformed_logged
        {
            // Once per answer: the model's text is returned as content, which is the client's
            // to judge, but an operator should know why a call did not come through.
            tracing::warn!(%reason, "a malformed tool call was returned as text");
            self.malformed_logged = true;
        }
        let mut parts = Parts::default();
        for fragment in fragments {
            match fragment {
                Fragment::Content(text) => parts.text.push_str(&text),
                Fragment::Reasoning(text) => parts.reasoning.push_str(&text),
                Fragment::ToolCall(call) => {
                    parts.tool_calls.push(ToolCall {
                        index: self.calls,
                        name: call.name,
                        arguments: call.arguments,
                    });
                    self.calls += 1;
                }
            }
        }
        parts
    }
}
