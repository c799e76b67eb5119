//! Response pieces shared by the chat and completion endpoints: ids, timestamps, usage and
//! finish reasons in their OpenAI shapes.

use std::hash::{BuildHasher, RandomState};
use std::time::{SystemTime, UNIX_EPOCH};

use corral_ipc::{FinishReason, Usage};
use serde::Serialize;

/// A fresh response id such as `chatcmpl-…`. Ids only need to be unique, not unpredictable, so
/// std's per-instance random hasher keys are enough and no RNG crate is pulled in.
pub fn response_id(prefix: &str) -> String {
    let state = RandomState::new();
    format!(
        "{prefix}-{:016x}{:08x}",
        state.hash_one(0u8),
        state.hash_one(1u8) as u32
    )
}

/// Unix seconds now; a clock before 1970 reads as 0 rather than failing a request.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// A cancelled sequence's answer only ever goes to a client that has disconnected, so it is
/// reported as `stop`.
pub fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::Cancelled => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
    }
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct UsageBody {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    pub prompt_tokens_details: PromptTokensDetails,
    /// Where the model's tokens were guessed ahead (speculative decoding).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// OpenAI's counts of predicted tokens, here the guesses of speculative decoding: those the
/// model confirmed and those it did not.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct CompletionTokensDetails {
    pub accepted_prediction_tokens: u32,
    pub rejected_prediction_tokens: u32,
}

/// OpenAI's breakdown of the prompt: how much of it came from the prefix cache.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct PromptTokensDetails {
    pub cached_tokens: u32,
}

impl From<Usage> for UsageBody {
    fn from(usage: Usage) -> Self {
        UsageBody {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.prompt_tokens.saturating_add(usage.completion_tokens),
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: usage.cached_tokens,
            },
            completion_tokens_details: (usage.drafted_tokens > 0).then(|| {
                CompletionTokensDetails {
                    accepted_prediction_tokens: usage.accepted_tokens,
                    rejected_prediction_tokens: usage
                        .drafted_tokens
                        .saturating_sub(usage.accepted_tokens),
                }
            }),
        }
    }
}
