//! The architectures this worker serves, by config.json's `model_type`; `arch/` has one
//! builder for each.

pub const SUPPORTED: &[&str] = &[
    "gemma3_text",
    "gpt_oss",
    "granite",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "smollm3",
];
