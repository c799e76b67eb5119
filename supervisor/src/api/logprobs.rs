//! Token log probabilities in the two OpenAI shapes: per-token objects for chat
//! (`{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}`) and parallel arrays for
//! legacy completions (`{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`).
//!
//! JSON has no infinity, and OpenAI reports impossible tokens as -9999.0, so non-finite values
//! are clamped to that rather than serialized as `null`.

use corral_ipc::{TokenLogprob, TopLogprob};
use serde::ser::{Serialize, SerializeMap, Serializer};

/// What OpenAI reports for a token the model gives no probability at all.
const IMPOSSIBLE: f32 = -9999.0;

fn finite(logprob: f32) -> f32 {
    if logprob.is_finite() {
        logprob
    } else {
        IMPOSSIBLE
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<ChatTopLogprob>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ChatTopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

pub fn chat(tokens: &[TokenLogprob]) -> ChatLogprobs {
    let top = |alt: &TopLogprob| ChatTopLogprob {
        token: alt.token.clone(),
        logprob: finite(alt.logprob),
        bytes: alt.token.as_bytes().to_vec(),
    };
    ChatLogprobs {
        content: tokens
            .iter()
            .map(|token| ChatTokenLogprob {
                token: token.token.clone(),
                logprob: finite(token.logprob),
                bytes: token.token.as_bytes().to_vec(),
                top_logprobs: token.top_logprobs.iter().map(top).collect(),
            })
            .collect(),
    }
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<TopMap>,
    pub text_offset: Vec<usize>,
}

/// One token's alternatives as a `{token: logprob}` object. Kept as pairs so the values
/// serialize as `f32` (a `serde_json::Value` would widen them to noisy `f64` digits).
#[derive(Debug, Clone, Default)]
pub struct TopMap(Vec<(String, f32)>);

impl Serialize for TopMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (token, logprob) in &self.0 {
            map.serialize_entry(token, logprob)?;
        }
        map.end()
    }
}

/// Converts `tokens`, continuing from `offset`: the character offset of the first token in the
/// generated text, advanced past these tokens so the next delta continues where this one ended.
pub fn completion(tokens: &[TokenLogprob], offset: &mut usize) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for token in tokens {
        out.tokens.push(token.token.clone());
        out.token_logprobs.push(finite(token.logprob));
        out.text_offset.push(*offset);
        *offset += token.token.chars().count();
        let mut top: Vec<(String, f32)> = Vec::with_capacity(token.top_logprobs.len());
        for alt in &token.top_logprobs {
            // Distinct ids can decode to the same text; an object keeps the likeliest.
            if !top.iter().any(|(seen, _)| *seen == alt.token) {
                top.push((alt.token.clone(), finite(alt.logprob)));
            }
        }
        out.top_logprobs.push(TopMap(top));
    }
    out
}
