//! The operations whose fastest form depends on where MLX computes. The blocks call these, and
//! each is MLX's own op as mlx-lm calls it — what Metal and CUDA run — unless the host kernels
//! (`host/`) were chosen when the model loaded: on MLX's CPU backend, for f32 activations, where
//! they are measured faster (see each kernel).

use std::sync::OnceLock;

use mlx_rs::error::Exception;
use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{Array, Device, DeviceType, Dtype, ops};

use super::host;
use super::kv_cache::KvCache;
use super::window::Window;

static HOST: OnceLock<bool> = OnceLock::new();

/// Chooses the kernels for this process, once, before the first model computes: the host's where
/// MLX's default device is the CPU.
pub fn choose() {
    HOST.get_or_init(|| {
        Device::try_default()
            .and_then(|device| device.get_type())
            .is_ok_and(|kind| matches!(kind, DeviceType::Cpu))
    });
}

/// Whether the host computes for activations of `dtype`.
fn on_host(dtype: Dtype) -> bool {
    dtype == Dtype::Float32 && HOST.get().copied().unwrap_or(false)
}

/// Elements from which the polynomial `exp` beats MLX's scalar one on the CPU. Measured on a
/// SiLU over rows of 2,816: MLX's costs 19 ns an element; the polynomial's dozen ops cost about
/// 0.1 ms to dispatch plus 3 ns an element, so it wins from about 4,000 elements (one decode
/// row: 0.054 against 0.120 ms; eight: 0.435 against 0.177 ms; 64: 3.57 against 0.93 ms).
const POLYNOMIAL_PAYS_FROM: usize = 4096;

fn polynomial_pays(dtype: Dtype, elements: usize) -> bool {
    elements >= POLYNOMIAL_PAYS_FROM && on_host(dtype)
}

/// `x · sigmoid(x)`.
pub fn silu(x: &Array) -> Result<Array, Exception> {
    if polynomial_pays(x.dtype(), x.size()) {
        return host::silu(x);
    }
    ops::multiply(x, &ops::sigmoid(x)?)
}

/// GELU with the exact erf.
pub fn gelu(x: &Array) -> Result<Array, Exception> {
    if polynomial_pays(x.dtype(), x.size()) {
        return host::gelu(x);
    }
    let erf = ops::erf(&ops::multiply(
        x,
        Array::from_f32(std::f32::consts::FRAC_1_SQRT_2),
    )?)?;
    ops::multiply(
        &ops::multiply(x, Array::from_f32(0.5))?,
        &ops::add(&erf, Array::from_f32(1.0))?,
    )
}

/// `x · weightᵀ (+ bias)` for an unquantized weight.
pub fn linear(x: &Array, weight: &Array, bias: Option<&Array>) -> Result<Array, Exception> {
    if on_host(x.dtype())
        && let Some(product) = host::matmul_transposed(x, weight, bias)?
    {
        return Ok(product);
    }
    match bias {
        Some(bias) => ops::addmm(bias, x, weight.t(), None, None),
        None => ops::matmul(x, weight.t()),
    }
}

/// Which keys the new positions see besides their past: those of their `window` only, and
/// among the runs in `both_ways` (`[start, end)` indices into the keys) also the run's later
/// positions (an image's tokens in Gemma 3's prompt).
#[derive(Clone, Copy, Default)]
pub struct Seen<'a> {
    pub window: Option<Window>,
    pub both_ways: &'a [(i32, i32)],
}

/// Attention of `queries` (`[1, heads, positions, head_dim]`) over `keys` and `values`
/// (`[1, kv_heads, cached, head_dim]`, the new positions last), each position seeing its past
/// as `seen` limits and widens it. `sinks` (`[heads]`) add one logit per head to each
/// softmax's denominator (gpt-oss); MLX computes those.
pub fn attention(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
    seen: Seen<'_>,
    sinks: Option<&Array>,
) -> Result<Array, Exception> {
    let (new_positions, cached) = (queries.dim(2), keys.dim(2));
    let (first, keys, values) = seen_keys(new_positions, keys, values, seen.window);
    let scores = queries.dim(1) as usize * new_positions as usize * keys.dim(2) as usize;
    let causal_only = seen.both_ways.is_empty();
    let on_host = causal_only && sinks.is_none() && polynomial_pays(queries.dtype(), scores);
    if seen.window.is_none() && causal_only && !on_host {
        let mask = (new_positions > 1).then_some(ScaledDotProductAttentionMask::Causal);
        return fast::scaled_dot_product_attention(queries, keys, values, scale, mask, sinks);
    }
    let visible = if new_positions > 1 {
        Some(visible_keys(new_positions, first, cached, seen)?)
    } else {
        None
    };
    if on_host {
        return host::attention(queries, &keys, &values, scale, visible.as_ref());
    }
    let mask = visible.as_ref().map(ScaledDotProductAttentionMask::Array);
    fast::scaled_dot_product_attention(queries, keys, values, scale, mask, sinks)
}

/// As [`attention`], each score `s` capped softly at `cap · tanh(s / cap)` before the mask and
/// softmax (Gemma 2), as mlx-lm computes it: MLX's fused attention cannot cap, so the scores
/// are written out, and the softmax is taken in f32.
pub fn softcapped_attention(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
    cap: f32,
    seen: Seen<'_>,
) -> Result<Array, Exception> {
    let (heads, new_positions, head_dim) = (queries.dim(1), queries.dim(2), queries.dim(3));
    let (kv_heads, cached) = (keys.dim(1), keys.dim(2));
    let (first, keys, values) = seen_keys(new_positions, keys, values, seen.window);
    let dtype = queries.dtype();
    let queries = ops::multiply(queries, Array::from_f32(scale).as_dtype(dtype)?)?;
    // Each key head serves `heads / kv_heads` query heads, grouped beside it.
    let queries = queries.reshape(&[1, kv_heads, heads / kv_heads, new_positions, head_dim])?;
    let keys = ops::expand_dims(&keys, 2)?;
    let values = ops::expand_dims(&values, 2)?;
    let scores = ops::matmul(&queries, keys.swap_axes(-1, -2)?)?;
    let cap = Array::from_f32(cap).as_dtype(dtype)?;
    let scores = ops::multiply(&ops::tanh(&ops::divide(&scores, &cap)?)?, &cap)?;
    let scores = if new_positions > 1 {
        let visible = visible_keys(new_positions, first, cached, seen)?;
        let hidden = Array::from_f32(f32::MIN).as_dtype(dtype)?;
        ops::select(&visible, &scores, &hidden)?
    } else {
        scores
    };
    let weights = ops::softmax_axis(&scores, -1, true)?;
    ops::matmul(&weights, &values)?.reshape(&[1, heads, new_positions, head_dim])
}

/// The keys and values some new position sees: from the first query's window on (`first`, the
/// index of the first kept), all of them without a window.
fn seen_keys(
    new_positions: i32,
    keys: &Array,
    values: &Array,
    window: Option<Window>,
) -> (i32, Array, Array) {
    let first = window.map_or(0, |window| window.first(keys.dim(2) - new_positions));
    if first > 0 {
        (
            first,
            keys.index((.., .., first.., ..)),
            values.index((.., .., first.., ..)),
        )
    } else {
        (0, keys.clone(), values.clone())
    }
}

/// `[new_positions, cached - first]`: whether the `i`-th new position (at
/// `cached - new_positions + i`) sees the key at `first + j`: not in its future unless both
/// are in one of the runs that see each other both ways, and within its window (transformers'
/// Gemma 3: the window's and the image's masks, `AND(window, OR(causal, image))`).
fn visible_keys(
    new_positions: i32,
    first: i32,
    cached: i32,
    seen: Seen<'_>,
) -> Result<Array, Exception> {
    let query_positions = ops::arange::<_, i32>(cached - new_positions, cached, None)?
        .reshape(&[new_positions, 1])?;
    let key_positions =
        ops::arange::<_, i32>(first, cached, None)?.reshape(&[1, cached - first])?;
    let mut causal = key_positions.le(&query_positions)?;
    for &(start, end) in seen.both_ways {
        let within = |positions: &Array| -> Result<Array, Exception> {
            ops::logical_and(
                &positions.ge(Array::from_int(start))?,
                &positions.lt(Array::from_int(end))?,
            )
        };
        let run = ops::logical_and(&within(&query_positions)?, &within(&key_positions)?)?;
        causal = ops::logical_or(&causal, &run)?;
    }
    let window_start = match seen.window {
        None => return Ok(causal),
        Some(Window::Sliding(size)) => {
            ops::subtract(&query_positions, Array::from_int(size.max(1) - 1))?
        }
        Some(Window::Chunk(size)) => ops::subtract(
            &query_positions,
            &ops::remainder(&query_positions, Array::from_int(size.max(1)))?,
        )?,
    };
    ops::logical_and(&causal, &key_positions.ge(&window_start)?)
}

/// Attention of a padded batch (`[rows, heads, length, head_dim]` each) in which every position
/// sees every real key of its row: `key_mask` is `[rows, 1, 1, length]`, true for real keys.
pub fn padded_attention(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
    key_mask: &Array,
) -> Result<Array, Exception> {
    let scores = queries.dim(0) as usize
        * queries.dim(1) as usize
        * queries.dim(2) as usize
        * keys.dim(2) as usize;
    if polynomial_pays(queries.dtype(), scores) {
        return host::padded_attention(queries, keys, values, scale, key_mask);
    }
    let mask = ScaledDotProductAttentionMask::Array(key_mask);
    fast::scaled_dot_product_attention(queries, keys, values, scale, mask, None)
}

/// Whether decode rows attend on the host, all in one call ([`attend_rows`]), rather than one
/// MLX attention per row.
pub fn rows_attend_on_host(dtype: Dtype) -> bool {
    on_host(dtype)
}

/// One new position per row (`queries` `[rows, heads, 1, head_dim]`, rotated), whose keys and
/// values are already the last of `caches[row]`: `[1, rows, heads * head_dim]`, computed on the
/// host in one pass over the caches, each row seeing its `window` if any; `None` leaves it to
/// MLX.
pub fn attend_rows(
    queries: &Array,
    caches: &[&mut KvCache],
    heads: i32,
    kv_heads: i32,
    scale: f32,
    window: Option<Window>,
) -> Result<Option<Array>, Exception> {
    if !on_host(queries.dtype()) {
        return Ok(None);
    }
    host::attend_rows(
        queries,
        caches,
        heads as usize,
        kv_heads as usize,
        scale,
        window,
    )
}

/// One sequence's new positions (`[1, heads, positions, head_dim]`, rotated) attending causally
/// over `cache`, which already holds them, within the `window` if any, computed on the host;
/// `None` leaves it to MLX.
pub fn attend_chunk(
    queries: &Array,
    cache: &KvCache,
    kv_heads: i32,
    scale: f32,
    window: Option<Window>,
) -> Result<Option<Array>, Exception> {
    if !on_host(queries.dtype()) {
        return Ok(None);
    }
    host::attend_chunk(queries, cache, kv_heads as usize, scale, window)
}

#[cfg(test)]
mod tests;
