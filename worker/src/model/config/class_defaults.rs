//! transformers 5.23's config-class defaults for the head layout and the rotation's base, by the
//! text model's `model_type`, where the class states one rather than deriving it
//! (`num_key_value_heads` from `num_attention_heads`, `head_dim` from
//! `hidden_size / num_attention_heads`) or takes another base than 10000. The latent
//! attention types are left out: their key-value heads are the latent's, which mlx-lm ignores.

/// `num_key_value_heads` where config.json leaves it out; `None`: as many as the query heads.
pub(super) fn kv_heads(model_type: &str) -> Option<i32> {
    Some(match model_type {
        "glm4" | "qwen3_next" | "qwen3_5_moe_text" => 2,
        "ernie4_5_moe" | "gemma2" | "gemma3_text" | "gemma4_text" | "qwen3_5_text"
        | "qwen3_moe" | "smollm3" => 4,
        "glm4_moe" | "gpt_oss" | "lfm2" | "lfm2_moe" | "llama4_text" | "minimax_m2"
        | "ministral3" | "mistral" | "mixtral" | "nemotron_h" | "seed_oss" => 8,
        "qwen2" | "qwen3" => 32,
        _ => return None,
    })
}

/// `head_dim` where config.json leaves it out; `None`: `hidden_size / num_attention_heads`.
pub(super) fn head_dim(model_type: &str) -> Option<i32> {
    Some(match model_type {
        "gpt_oss" => 64,
        "glm4" | "llama4_text" | "minimax_m2" | "ministral3" | "nemotron_h" | "qwen3"
        | "seed_oss" => 128,
        "gemma2" | "gemma3_text" | "gemma4_text" | "qwen3_5_text" | "qwen3_5_moe_text"
        | "qwen3_next" => 256,
        _ => return None,
    })
}

/// `rope_theta` where config.json has neither it nor `rope_parameters`; `None`: 10000. For the
/// types whose layer kinds rotate apart, the full-attention layers' base.
pub(super) fn rope_theta(model_type: &str) -> Option<f32> {
    Some(match model_type {
        "gpt_oss" => 150_000.0,
        "ernie4_5_moe" | "llama4_text" | "olmo3" => 500_000.0,
        "gemma3_text" | "gemma4_text" | "lfm2" | "lfm2_moe" | "ministral3" | "mixtral" => {
            1_000_000.0
        }
        "smollm3" => 2_000_000.0,
        "minimax_m2" => 5_000_000.0,
        _ => return None,
    })
}
