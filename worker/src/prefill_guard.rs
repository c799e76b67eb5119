//! The prefill memory guard: a request whose prefill would push this worker past the memory limit
//! the supervisor gave it is refused before any compute, instead of growing until the machine
//! swaps or the kernel kills the worker mid-request.
//!
//! The estimate is deliberately simple and errs high: it counts what a prefill adds on top of the
//! memory already in use (the prompt's KV cache and the largest chunk's activations), not what a
//! fused attention kernel or MLX's buffer reuse might save.

use mlx_rs::Dtype;

use crate::model::{FeedForwardShape, KV_CACHE_STEP, LayerShape, ModelConfig};

/// A prefill that does not fit under the worker's memory limit, with the numbers behind it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "prefill of {prompt_tokens} prompt tokens needs about {}{} on top of {} in use, over this \
     worker's memory limit of {}",
    human(*needed),
    tower_share(*tower),
    human(*in_use),
    human(*limit)
)]
pub struct PrefillTooLarge {
    pub prompt_tokens: usize,
    pub needed: u64,
    /// The vision tower's part of `needed`.
    pub tower: u64,
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
    /// The vision tower's peak on the prompt's largest image, beside the chunk's.
    pub tower: u64,
    /// The draft model's cache for the prompt, where the sequence guesses with one.
    pub draft: u64,
}

/// The model as the estimate sees it: the shape every layer shares and each layer's own.
#[derive(Clone, Copy)]
pub struct Shape<'a> {
    config: &'a ModelConfig,
    layers: &'a [LayerShape],
    /// Bytes per activation element.
    element_bytes: u64,
}

impl<'a> Shape<'a> {
    pub fn new(config: &'a ModelConfig, layers: &'a [LayerShape], dtype: Dtype) -> Self {
        Self {
            config,
            layers,
            element_bytes: element_bytes(dtype),
        }
    }

    pub fn element_bytes(&self) -> u64 {
        self.element_bytes
    }
}

/// Refuses a prefill when MLX's active memory, the reservations and its estimated peak exceed
/// `limit`. Reads MLX's allocator counter, so it runs on the engine thread.
pub fn admit(shape: Shape<'_>, prefill: Prefill, limit: u64) -> Result<(), PrefillTooLarge> {
    // An unreadable counter counts as nothing in use: the estimate alone still guards.
    let in_use = mlx_rs::memory::active_memory().map_or(0, |bytes| bytes as u64);
    let needed = prefill_peak_bytes(shape, prefill.prompt_tokens, prefill.chunk);
    check(
        needed
            .saturating_add(prefill.tower)
            .saturating_add(prefill.draft),
        in_use.saturating_add(prefill.reserved),
        limit,
        prefill.prompt_tokens,
    )
    .map_err(|too_large| PrefillTooLarge {
        tower: prefill.tower,
        ..too_large
    })
}

/// Bytes of the KV cache a prompt of `prompt_tokens`, prefilled `chunk` positions per pass,
/// fills: what a sequence still to be prefilled will take.
pub fn kv_cache_bytes(shape: Shape<'_>, prompt_tokens: usize, chunk: usize) -> u64 {
    shape
        .layers
        .iter()
        .map(|layer| layer_kv_bytes(shape, layer, prompt_tokens, chunk))
        .sum()
}

fn dim(value: i32) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// Positions a layer's cache holds after a prefill of `prompt_tokens`, in whole cache steps. A
/// sliding window's cache lets go of old positions only once a whole window of them can go, and
/// the chunk being added comes on top, so it holds under two windows and a chunk.
fn held_positions(layer: &LayerShape, prompt_tokens: usize, chunk: usize) -> u64 {
    let step = dim(KV_CACHE_STEP);
    let whole_steps = |positions: u64| positions.div_ceil(step) * step;
    let prompt = whole_steps(prompt_tokens as u64);
    match layer.sliding_window {
        Some(window) => prompt.min(whole_steps(2 * dim(window) + chunk as u64)),
        None => prompt,
    }
}

/// A layer's cache: keys and values per position as the layer holds them (a latent attention
/// layer's latent and rotary key, far fewer than full heads), or a recurrent layer's state in
/// their place, the same for any prompt.
fn layer_kv_bytes(shape: Shape<'_>, layer: &LayerShape, prompt_tokens: usize, chunk: usize) -> u64 {
    if let Some(state) = layer.recurrent {
        return state.bytes(shape.element_bytes);
    }
    u64::try_from(layer.cache.elements()).unwrap_or(0)
        * held_positions(layer, prompt_tokens, chunk)
        * shape.element_bytes
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
        tower: 0,
        in_use,
        limit,
    })
}

/// Bytes a prefill of `prompt_tokens` adds at its peak.
///
/// With P prompt tokens, C = min(P, chunk) the largest chunk, S = P rounded up to the cache step,
/// H query heads, K kv heads, D head dim, E hidden, V vocab and b bytes per activation element:
///   KV cache     W_l·S_l·b per layer        (kept for the whole request: W_l keys and values
///                                            per position, 2·K·D for grouped heads; S_l = S, or for a
///                                            sliding window w at most 2w + C in whole steps;
///                                            a recurrent layer's state instead, constant, and
///                                            no scores)
///   one layer    4·C·E·b                    (residual, its norm, attention output, sum)
///              + 2·C·(H+2K)·D·b             (q, k, v and their rotated copies)
///              + 2·C·S_l·H·4                (scores and masked scores, counted as f32)
///              + its feed-forward:
///                  an MLP I wide            3·C·I·b (gate, up and their product)
///                  k of N experts I wide    3·C·k·I·b + C·k·E·b (each chosen expert's gate,
///                                           up, product and output) + 2·C·N·4 (router logits
///                                           and scores, f32) + 3·C·I_s·b (shared experts I_s)
///   logits       V·(b+4)                    (the last position's row and its f32 copy)
/// Layers run one after another, so only the largest layer's transients count. A mixture of
/// experts computes only its chosen experts (`gather_mm`), so its weights are all loaded already
/// and its activations scale with k, not N.
fn prefill_peak_bytes(shape: Shape<'_>, prompt_tokens: usize, chunk: usize) -> u64 {
    let config = shape.config;
    let b = shape.element_bytes;
    let (heads, kv_heads) = (dim(config.num_heads), dim(config.num_kv_heads));
    let (head_dim, hidden, vocab) = (
        dim(config.head_dim),
        dim(config.hidden_size),
        dim(config.vocab_size),
    );
    let c = (prompt_tokens as u64).min(chunk as u64);
    let layer = |layer: &LayerShape| {
        // A recurrent layer scores no keys.
        let keys = match layer.recurrent {
            Some(_) => 0,
            None => held_positions(layer, prompt_tokens, chunk).min(prompt_tokens as u64),
        };
        let attention = 4 * c * hidden * b
            + 2 * c * (heads + 2 * kv_heads) * head_dim * b
            + 2 * c * keys * heads * 4;
        let feed_forward = match layer.feed_forward {
            FeedForwardShape::Dense { inner } => 3 * c * dim(inner) * b,
            FeedForwardShape::Experts {
                experts,
                top_k,
                inner,
                shared_inner,
            } => {
                let k = dim(top_k);
                3 * c * k * dim(inner) * b
                    + c * k * hidden * b
                    + 2 * c * dim(experts) * 4
                    + 3 * c * dim(shared_inner) * b
            }
        };
        attention + feed_forward
    };
    let transients = shape.layers.iter().map(layer).max().unwrap_or(0);
    let logits = vocab * (b + 4);
    kv_cache_bytes(shape, prompt_tokens, chunk) + transients + logits
}

/// Bytes per element of the model's activations (the float type its weights compute in).
fn element_bytes(dtype: Dtype) -> u64 {
    match dtype {
        Dtype::Float16 | Dtype::Bfloat16 => 2,
        Dtype::Float64 => 8,
        _ => 4,
    }
}

fn tower_share(tower: u64) -> String {
    match tower {
        0 => String::new(),
        bytes => format!(
            " ({} of it the vision tower's on the largest image)",
            human(bytes)
        ),
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
mod tests;
