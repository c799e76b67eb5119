//! The OpenAI-compatible HTTP API: `POST /v1/chat/completions`, `POST /v1/completions`,
//! `POST /v1/embeddings`, `POST /v1/rerank`, `GET /v1/models` and `GET /health` (and the
//! Responses and Anthropic Messages APIs), served by axum over an abstract [`Backend`].
//!
//! This layer parses and validates requests, resolves model names, and relays a generation as
//! JSON or server-sent events. It knows nothing of processes: the worker pool implements
//! [`Backend`], and the tests use an in-memory one. Every error answer, whatever its cause, is
//! built in `error.rs`.

mod anthropic;
mod backend;
mod chat;
mod chat_response;
mod completions;
mod embeddings;
mod error;
mod extract;
mod generation;
mod hosted_tools;
mod images;
mod logprobs;
mod messages;
mod models;
mod output_format;
mod rerank;
mod responses;
mod router;
mod sampling;
mod served_model;
mod sse;
mod tools;
mod types;

#[cfg(test)]
mod tests;

pub use anthropic::is_anthropic_route;
pub use backend::{
    Backend, BackendError, CancelOnDrop, Embedded, GenerationStream, ModelCard, PinnedModel,
    Scored, StreamEvent,
};
pub use images::ImageFetch;
pub use router::{MAX_BODY_BYTES, router};
pub use served_model::ServedModel;
