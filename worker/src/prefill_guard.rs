//! The prefill memory guard: a request whose prefill would push this worker past the memory limit
//! the supervisor gave it is refused before any compute, instead of growing until the machine
//! swaps or the kernel kills the worker mid-request.
//!
//! The estimate is deliberately simple and errs high: it counts what a prefill adds on top of the
//! memory already in use (the prompt's KV cache and the largest chunk's activations), not what a
//! fused attention kernel or MLX's buffer reuse might save.

use mlx_rs::Dtype;

use crate::model::{KV_CACHE_STEP, ModelConfig};

/// A prefill that does not fit under the worker's memory limit, with the numbers behind it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "prefill of {prompt_tokens} prompt tokens needs about {} on top of {} in use, over this \
     worker's memory limit of {}",
    human(*needed),
    human(*in_use),
    human(*limit)
)]
pub struct PrefillTooLarge {
    pub prompt_tokens: usize,
    pub needed: u64,
    pub in_use: u64,
    pub limit: u64,
}

/// What a new sequence's prefill is checked against.
#[derive(Debug, Clone, Copy)]
pub struct Prefill {
    pub prompt_tokens: usize,
    /// Prompt positions computed per forward pass.
    pub chunk: usize,
    /// Bytes promised to sequences admitted before it whose prefill has not yet allocated them.
    pub reserved: u64,
}

/// Refuses a prefill when MLX's active memory, the reservations and its estimated peak exceed
/// `limit`. Reads MLX's allocator counter, so it runs on the engine thread.
pub fn admit(
    config: &ModelConfig,
    dtype: Dtype,
    prefill: Prefill,
    limit: u64,
) -> Result<(), PrefillTooLarge> {
    // An unreadable counter counts as nothing in use: the estimate alone still guards.
    let in_use = mlx_rs::memory::active_memory().map_or(0, |bytes| bytes as u64);
    let b = element_bytes(dtype);
    check(
        prefill_peak_bytes(config, b, prefill.prompt_tokens, prefill.chunk),
        in_use.saturating_add(prefill.reserved),
        limit,
        prefill.prompt_tokens,
    )
}

/// Bytes of the KV cache a prompt of `prompt_tokens` fills (in whole cache steps): what a
/// sequence still to be prefilled will take.
pub fn kv_cache_bytes(config: &ModelConfig, dtype: Dtype, prompt_tokens: usize) -> u64 {
    kv_bytes(config, element_bytes(dtype), prompt_tokens)
}

fn kv_bytes(config: &ModelConfig, b: u64, tokens: usize) -> u64 {
    let dim = |value: i32| u64::try_from(value).unwrap_or(0);
    let step = dim(KV_CACHE_STEP);
    let cached = (tokens as u64).div_ceil(step) * step;
    dim(config.num_layers) * 2 * dim(config.num_kv_heads) * dim(config.head_dim) * cached * b
}

fn check(
    needed: u64,
    in_use: u64,
    limit: u64,
    prompt_tokens: usize,
) -> Result<(), PrefillTooLarge> {
    if in_use.saturating_add(needed) <= limit {
        return Ok(());
    }
    Err(PrefillTooLarge {
        prompt_tokens,
        needed,
        in_use,
        limit,
    })
}

/// Bytes a prefill of `prompt_tokens` adds at its peak, with `b` bytes per activation element.
///
/// With P prompt tokens, C = min(P, chunk) the largest chunk, S = P rounded up to the cache step,
/// L layers, H query heads, K kv heads, D head dim, E hidden, I intermediate and V vocab:
///   KV cache     L·2·K·D·S·b                (kept for the whole request)
///   one layer    4·C·E·b                    (residual, its norm, attention output, sum)
///              + 2·C·(H+2K)·D·b             (q, k, v and their rotated copies)
///              + 2·C·P·H·4                  (scores and masked scores, counted as f32)
///              + 3·C·I·b                    (gate, up and their product)
///   logits       V·(b+4)                    (the last position's row and its f32 copy)
/// Layers run one after another, so one layer's transients count once.
fn prefill_peak_bytes(config: &ModelConfig, b: u64, prompt_tokens: usize, chunk: usize) -> u64 {
    let dim = |value: i32| u64::try_from(value).unwrap_or(0);
    let (heads, kv_heads) = (dim(config.num_heads), dim(config.num_kv_heads));
    let (head_dim, hidden, inner, vocab) = (
        dim(config.head_dim),
        dim(config.hidden_size),
        dim(config.intermediate_size),
        dim(config.vocab_size),
    );
    let prompt = prompt_tokens as u64;
    let chunk = prompt.min(chunk as u64);
    let kv_cache = kv_bytes(config, b, prompt_tokens);
    let layer = 4 * chunk * hidden * b
        + 2 * chunk * (heads + 2 * kv_heads) * head_dim * b
        + 2 * chunk * prompt * heads * 4
        + 3 * chunk * inner * b;
    let logits = vocab * (b + 4);
    kv_cache + layer + logits
}

/// Bytes per element of the model's activations (the float type its weights compute in).
fn element_bytes(dtype: Dtype) -> u64 {
    match dtype {
        Dtype::Float16 | Dtype::Bfloat16 => 2,
        Dtype::Float64 => 8,
        _ => 4,
    }
}

/// Bytes in binary units with one decimal, as people read memory figures.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiny fixture's shape (`corral fixture --size tiny`), in f32.
    fn tiny() -> ModelConfig {
        let config = serde_json::json!({
            "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
            "vocab_size": 1024, "rms_norm_eps": 1e-5, "max_position_embeddings": 8192,
            "tie_word_embeddings": false,
        });
        ModelConfig::from_json(config, std::path::Path::new("config.json")).unwrap()
    }

    #[test]
    fn a_short_prompt_costs_one_cache_step_and_small_activations() {
        // P = 20, C = 20, S = 256, b = 4.
        let kv_cache = 4 * 2 * 4 * 32 * 256 * 4; // 1_048_576
        let layer = 4 * 20 * 256 * 4 // 81_920
            + 2 * 20 * 16 * 32 * 4 // 81_920
            + 2 * 20 * 20 * 8 * 4 // 25_600
            + 3 * 20 * 512 * 4; // 122_880
        let logits = 1024 * 8;
        assert_eq!(kv_cache + layer + logits, 1_369_088);
        assert_eq!(prefill_peak_bytes(&tiny(), 4, 20, 512), 1_369_088);
    }

    #[test]
    fn a_long_prompt_is_dominated_by_the_chunks_attention_scores() {
        // P = 7000, C = 512, S = 7168, b = 4.
        let kv_cache = 4 * 2 * 4 * 32 * 7168 * 4; // 29_360_128
        let layer = 4 * 512 * 256 * 4 // 2_097_152
            + 2 * 512 * 16 * 32 * 4 // 2_097_152
            + 2 * 512 * 7000 * 8 * 4 // 229_376_000
            + 3 * 512 * 512 * 4; // 3_145_728
        let logits = 1024 * 8;
        assert_eq!(kv_cache + layer + logits, 266_084_352);
        assert_eq!(prefill_peak_bytes(&tiny(), 4, 7000, 512), 266_084_352);
    }

    #[test]
    fn half_precision_halves_everything_but_the_f32_terms() {
        // The f32 scores (229_376_000) and logits copy (4_096) stay; the rest halves.
        let f32_terms = 229_376_000 + 1024 * 4;
        let halved = (266_084_352 - f32_terms) / 2;
        assert_eq!(
            prefill_peak_bytes(&tiny(), element_bytes(Dtype::Bfloat16), 7000, 512),
            halved + f32_terms
        );
    }

    #[test]
    fn a_prefill_that_crosses_the_limit_is_refused_with_the_numbers() {
        let mib = 1024 * 1024;
        assert_eq!(check(50 * mib, 14 * mib, 64 * mib, 10), Ok(()));
        let refused = check(71 * mib + mib / 5, 11 * mib + mib / 2, 64 * mib, 7000).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "prefill of 7000 prompt tokens needs about 71.2 MiB on top of 11.5 MiB in use, \
             over this worker's memory limit of 64.0 MiB"
        );
    }

    #[test]
    fn human_units_pick_the_largest_unit_below_the_value() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }
}
