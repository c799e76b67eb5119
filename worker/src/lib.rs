//! corral-worker: one model, its MLX state, tokenizer and generation.

pub mod batch;
pub mod chat_template;
pub mod cli;
pub mod constraint;
pub mod describe;
pub mod detokenizer;
pub mod distributed;
pub mod embedding;
mod encoded_images;
pub mod engine;
mod fast_exp;
pub mod generation;
pub mod gguf;
pub mod image;
#[cfg(not(target_os = "macos"))]
mod linux_shim;
mod load_failure;
pub mod loaded;
pub mod lockstep;
pub mod model;
pub mod model_json;
pub mod one_shot;
pub mod output;
pub mod prefill_guard;
pub mod prefix_cache;
mod process_memory;
pub mod prompt_images;
pub mod sampling;
pub mod sampling_defaults;
mod sequence;
pub mod serve;
pub mod speculation;
pub mod stop_strings;
pub mod stop_tokens;
mod system_reminder;
pub mod tools;
mod wire;
