//! Conversions between the wire protocol's types and the engine's.

use corral_ipc::{
    ContextOverflow, FinishReason as WireFinish, FromWorker, GenerateRequest as WireRequest,
    Prompt as WirePrompt, RejectKind, Timings as WireTimings, TokenLogprob as WireLogprob,
    TopLogprob, Usage,
};

use crate::generation::{
    Event, FinishReason, GenerateError, GenerateRequest, OutputOptions, Prompt, RejectReason,
    TokenLogprob,
};
use crate::sampling::SamplingParams;

pub fn to_generate_request(request: Box<WireRequest>) -> GenerateRequest {
    let request = *request;
    let sampling = sampling_params(&request);
    GenerateRequest {
        prompt: match request.prompt {
            WirePrompt::Text(text) => Prompt::Text(text),
            WirePrompt::Chat {
                messages,
                tools,
                template_kwargs,
                images,
            } => Prompt::Chat {
                messages,
                tools: tools.map(serde_json::Value::Array),
                template_kwargs,
                images,
            },
            WirePrompt::Tokens(tokens) => Prompt::Tokens(tokens),
        },
        sampling,
        // `None` only from callers other than the supervisor: up to the context window.
        max_tokens: request.max_tokens.map_or(usize::MAX, |max| max as usize),
        stop: request.stop.unwrap_or_default(),
        logprobs: request.logprobs.map(|top| top as usize),
        output: OutputOptions {
            tool_choice: request.tool_choice.unwrap_or_default(),
            parallel_tool_calls: request.parallel_tool_calls,
            format: request.output_format,
            reasoning_budget: request.reasoning_budget.map(|budget| budget as usize),
        },
        count_only: request.count_only,
        speculative: request.speculative,
    }
}

/// The request's sampling, with what it leaves out off (see `GenerateRequest`).
fn sampling_params(request: &WireRequest) -> SamplingParams {
    let off = SamplingParams::default();
    SamplingParams {
        temperature: request.temperature.unwrap_or(off.temperature),
        top_p: request.top_p.unwrap_or(off.top_p),
        top_k: request.top_k.map_or(off.top_k, |k| k as usize),
        min_p: request.min_p.unwrap_or(off.min_p),
        repetition_penalty: request.repetition_penalty.unwrap_or(off.repetition_penalty),
        presence_penalty: request.presence_penalty.unwrap_or(off.presence_penalty),
        frequency_penalty: request.frequency_penalty.unwrap_or(off.frequency_penalty),
        seed: request.seed,
        ..off
    }
}

/// How a request's last frame ended it, for the worker's stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It ran: to `Done`, or to an error mid-generation.
    Completed,
    Cancelled,
    /// It was refused before any compute, so no sequence ran.
    Rejected,
}

/// The frame for one engine event, and, for the request's last event, how it ended.
pub fn to_wire_event(id: u64, event: Result<Event, GenerateError>) -> (FromWorker, Option<Ending>) {
    match event {
        Ok(Event::Accepted {
            prompt_tokens,
            cached_tokens,
        }) => (
            FromWorker::Accepted {
                id,
                prompt_tokens: saturate(prompt_tokens),
                cached_tokens: Some(saturate(cached_tokens)),
            },
            None,
        ),
        Ok(Event::Delta {
            text,
            reasoning,
            tool_calls,
            token_count,
            logprobs,
        }) => (
            FromWorker::Delta {
                id,
                text,
                reasoning,
                tool_calls,
                token_count: saturate(token_count),
                logprobs: (!logprobs.is_empty())
                    .then(|| logprobs.into_iter().map(to_wire_logprob).collect()),
            },
            None,
        ),
        Ok(Event::Done {
            finish_reason,
            stop_sequence,
            timings,
        }) => {
            let ending = if finish_reason == FinishReason::Cancelled {
                Ending::Cancelled
            } else {
                Ending::Completed
            };
            let frame = FromWorker::Done {
                id,
                stop_sequence,
                finish_reason: match finish_reason {
                    FinishReason::Stop => WireFinish::Stop,
                    FinishReason::Length => WireFinish::Length,
                    FinishReason::Cancelled => WireFinish::Cancelled,
                    FinishReason::ToolCalls => WireFinish::ToolCalls,
                },
                usage: Usage {
                    prompt_tokens: saturate(timings.prompt_tokens),
                    completion_tokens: saturate(timings.completion_tokens),
                    cached_tokens: saturate(timings.cached_tokens),
                    drafted_tokens: saturate(timings.drafted),
                    accepted_tokens: saturate(timings.accepted),
                    diverged_at: timings.diverged_at.map(saturate),
                },
                timings: WireTimings {
                    prefill_ms: timings.prefill.as_millis() as u64,
                    decode_ms: timings.decode.as_millis() as u64,
                    images_encoded: saturate(timings.images_encoded),
                    image_encode_ms: timings.image_encode.as_millis() as u64,
                },
            };
            (frame, Some(ending))
        }
        Err(GenerateError::Rejected(reason)) => {
            let kind = match reason {
                RejectReason::PromptTooLong { .. } => RejectKind::PromptTooLong,
                RejectReason::PrefillMemory(_) => RejectKind::PrefillMemory,
                _ => RejectKind::InvalidRequest,
            };
            let overflow = match reason {
                RejectReason::PromptTooLong { prompt, context } => Some(ContextOverflow {
                    prompt_tokens: saturate(prompt),
                    context_tokens: saturate(context),
                }),
                _ => None,
            };
            let message = reason.to_string();
            let param = reason.param().map(str::to_owned);
            (
                FromWorker::Rejected {
                    id,
                    kind,
                    message,
                    param,
                    overflow,
                },
                Some(Ending::Rejected),
            )
        }
        Err(error) => {
            let message = format!("{error}: {}", source_chain(&error));
            (FromWorker::Error { id, message }, Some(Ending::Completed))
        }
    }
}

fn to_wire_logprob(logprob: TokenLogprob) -> WireLogprob {
    WireLogprob {
        token_id: logprob.token,
        token: logprob.text,
        logprob: logprob.logprob,
        top_logprobs: logprob
            .top
            .into_iter()
            .map(|(token_id, token, logprob)| TopLogprob {
                token_id,
                token,
                logprob,
            })
            .collect(),
    }
}

fn source_chain(error: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        parts.push(cause.to_string());
        source = cause.source();
    }
    parts.join(": ")
}

fn saturate(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}
