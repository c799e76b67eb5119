//! The architectures this worker serves, by config.json's `model_type`; `arch/` has one
//! builder for each.

pub const SUPPORTED: &[&str] = &[
    "gemma3",
    "gemma3_text",
    "gemma4",
    "gemma4_text",
    "glm4_moe",
    "gpt_oss",
    "granite",
    "lfm2",
    "lfm2_moe",
    "llama",
    "llama4",
    "llama4_text",
    "ministral3",
    "mistral",
    "mistral3",
    "mixtral",
    "phi3",
    "qwen2",
    "qwen3",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_moe",
    "qwen3_next",
    "smollm3",
];
