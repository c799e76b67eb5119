//! Attention on the CPU, computed on the host: a decode step's for all its sequences at once, and
//! a prompt chunk's.
//!
//! One new position attending over a cache of a few hundred is a few hundred thousand multiplies
//! a sequence, but MLX's CPU backend spends it in a dozen ops and two small BLAS calls per key
//! head, each with its own dispatch and packing: on the `small` f32 fixture, eight decoding
//! sequences spent about 50 ms of a 130 ms step there. Reading each sequence's evaluated cache
//! in place and computing the scores, softmax and weighted values directly takes under 5 ms.

use std::ops::Range;

use mlx_rs::Array;
use mlx_rs::error::Exception;
use rayon::prelude::*;

use crate::fast_exp::exp_nonpositive;
use crate::model::kv_cache::KvCache;
use crate::model::window::Window;

/// `queries` is `[rows, heads, 1, head_dim]`, one new rotated position per row, whose keys and
/// values are already the last of `caches[row]`. Returns `[1, rows, heads * head_dim]`, or
/// `None` where a cache or the queries are not row-major f32 buffers the host can read.
pub(crate) fn attend_rows(
    queries: &Array,
    caches: &[&mut KvCache],
    heads: usize,
    kv_heads: usize,
    scale: f32,
    window: Option<Window>,
) -> Result<Option<Array>, Exception> {
    let Some(buffers) = caches
        .iter()
        .map(|cache| cache.buffers())
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let arrays = buffers.iter().flat_map(|(keys, values)| [*keys, *values]);
    mlx_rs::transforms::eval(std::iter::once(queries).chain(arrays))?;
    let shape = Heads {
        heads,
        kv_heads,
        head_dim: queries.dim(-1) as usize,
        scale,
        window,
    };
    let Some(cached) = caches
        .iter()
        .zip(&buffers)
        .map(|(cache, (keys, values))| CachedHeads::read(keys, values, cache.held_len(), shape))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let Ok(queries) = queries.try_as_slice::<f32>() else {
        return Ok(None);
    };
    let output = attend_one_position(queries, &cached, shape);
    let rows = caches.len() as i32;
    Ok(Some(Array::from_slice(
        &output,
        &[1, rows, (heads * shape.head_dim) as i32],
    )))
}

/// `queries` is `[1, heads, positions, head_dim]`, one sequence's new rotated positions, whose
/// keys and values are already the last of `cache`; each attends up to its own position. Returns
/// the same shape, or `None` where the host cannot read the buffers.
///
/// MLX computes this as a `[heads, positions, cached]` score array through a dozen elementwise
/// ops, each writing a fresh array of that size: a 256-token chunk late in an 8,000-token prompt
/// spent most of its time there and in the page faults of those arrays. Here each position's
/// scores stay in a buffer of one row: that prompt on the tiny fixture in 256-token chunks took
/// 8.0 s against 37.9 s, and 6.6 s against 91 s in one pass.
pub(crate) fn attend_chunk(
    queries: &Array,
    cache: &KvCache,
    kv_heads: usize,
    scale: f32,
    window: Option<Window>,
) -> Result<Option<Array>, Exception> {
    let Some((keys, values)) = cache.buffers() else {
        return Ok(None);
    };
    mlx_rs::transforms::eval([queries, keys, values])?;
    let shape = Heads {
        heads: queries.dim(1) as usize,
        kv_heads,
        head_dim: queries.dim(-1) as usize,
        scale,
        window,
    };
    let Some(cached) = CachedHeads::read(keys, values, cache.held_len(), shape) else {
        return Ok(None);
    };
    let Ok(query_data) = queries.try_as_slice::<f32>() else {
        return Ok(None);
    };
    if query_data.len() / (shape.heads * shape.head_dim) > cached.length {
        return Ok(None);
    }
    let output = attend_causal_chunk(query_data, &cached, shape);
    Ok(Some(Array::from_slice(&output, queries.shape())))
}

/// One sequence's cached keys and values: `[kv_heads, capacity, head_dim]` row-major, of which
/// the first `length` positions of each head are filled.
struct CachedHeads<'a> {
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub capacity: usize,
    pub length: usize,
}

/// The shape of the heads.
#[derive(Clone, Copy)]
struct Heads {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    /// The keys each position sees besides its causal past.
    pub window: Option<Window>,
}

/// `queries` is `[rows, heads, head_dim]`, one new (rotated) position per row, whose keys and
/// values are already the last of `caches[row]`. Returns `[rows, heads * head_dim]`.
fn attend_one_position(queries: &[f32], caches: &[CachedHeads<'_>], shape: Heads) -> Vec<f32> {
    let width = shape.heads * shape.head_dim;
    let mut output = vec![0f32; caches.len() * width];
    output
        .par_chunks_mut(width)
        .zip(queries.par_chunks(width))
        .zip(caches.par_iter())
        .for_each_init(Vec::new, |weights, ((output, queries), cache)| {
            for (head, (output, query)) in output
                .chunks_exact_mut(shape.head_dim)
                .zip(queries.chunks_exact(shape.head_dim))
                .enumerate()
            {
                let (keys, values) = cache.visible(head, cache.length, shape);
                attend_head(output, query, keys, values, shape.scale, weights);
            }
        });
    output
}

/// Positions of a chunk that attend together, as two matrix products (`matrixmultiply`'s packed
/// kernels): their scores against every key they see, then their weights times the values. One
/// position at a time, each read every key and value of its head from memory for a few
/// multiplies apiece, and a long prompt's prefill waited on memory: a 24,000-token prompt on the
/// Qwen3.5 vision fixture ran at 290 tokens/s that way in the tests' build, at 850 in blocks of
/// 64 (16: 690; 128: 670).
const QUERY_BLOCK: usize = 64;

/// `queries` is `[heads, positions, head_dim]`, one sequence's new (rotated) positions, whose
/// keys and values are already the last `positions` of `cache`; each sees the keys up to its own
/// (within the window, if any).
/// Returns the same shape.
fn attend_causal_chunk(queries: &[f32], cache: &CachedHeads<'_>, shape: Heads) -> Vec<f32> {
    let per_head = queries.len() / shape.heads;
    let first = cache.length - per_head / shape.head_dim;
    let block = QUERY_BLOCK * shape.head_dim;
    let mut output = vec![0f32; queries.len()];
    output
        .par_chunks_mut(per_head)
        .zip(queries.par_chunks(per_head))
        .enumerate()
        .flat_map(|(head, (output, queries))| {
            output
                .par_chunks_mut(block)
                .zip(queries.par_chunks(block))
                .enumerate()
                .map(move |(index, rows)| (head, index, rows))
        })
        .for_each_init(Vec::new, |weights, (head, index, (output, queries))| {
            let start = first + index * QUERY_BLOCK;
            let rows = queries.len() / shape.head_dim;
            let seen: Vec<_> = (start..start + rows)
                .map(|position| cache.seen(position + 1, shape))
                .collect();
            let (keys, values) = cache.head(head, shape);
            attend_block(output, queries, &seen, keys, values, shape.scale, weights);
        });
    output
}

impl<'a> CachedHeads<'a> {
    /// An evaluated cache's buffers (`[1, kv_heads, capacity, head_dim]` each) as host slices, or
    /// `None` where they are not row-major f32 of that shape.
    fn read(keys: &'a Array, values: &'a Array, held: i32, shape: Heads) -> Option<Self> {
        let capacity = keys.dim(2) as usize;
        let (Ok(keys), Ok(values)) = (keys.try_as_slice::<f32>(), values.try_as_slice::<f32>())
        else {
            return None;
        };
        let length = usize::try_from(held).ok()?;
        let complete = keys.len() == shape.kv_heads * capacity * shape.head_dim;
        (complete && values.len() == keys.len() && length <= capacity).then_some(CachedHeads {
            keys,
            values,
            capacity,
            length,
        })
    }

    /// The keys and values that position `end - 1` sees, of the key head that query head
    /// `head` reads: all before it, or its window's.
    fn visible(&self, head: usize, end: usize, shape: Heads) -> (&[f32], &[f32]) {
        let seen = self.seen(end, shape);
        let (keys, values) = self.head(head, shape);
        let visible = seen.start * shape.head_dim..seen.end * shape.head_dim;
        (&keys[visible.clone()], &values[visible])
    }

    /// The filled keys and values of the key head that query head `head` reads.
    fn head(&self, head: usize, shape: Heads) -> (&[f32], &[f32]) {
        let start = head / (shape.heads / shape.kv_heads) * self.capacity * shape.head_dim;
        let filled = start..start + self.length * shape.head_dim;
        (&self.keys[filled.clone()], &self.values[filled])
    }

    /// The positions that position `end - 1` sees: all before it, or its window's.
    fn seen(&self, end: usize, shape: Heads) -> Range<usize> {
        let first = shape
            .window
            .map_or(0, |window| window.first(end as i32 - 1) as usize);
        first..end
    }
}

/// One head's rows of `queries` (`[rows, head_dim]`), row `r` over the keys and values
/// (`[positions, head_dim]` each) of positions `seen[r]`, into `output` (the same shape).
/// `weights` is scratch space.
fn attend_block(
    output: &mut [f32],
    queries: &[f32],
    seen: &[Range<usize>],
    keys: &[f32],
    values: &[f32],
    scale: f32,
    weights: &mut Vec<f32>,
) {
    let (Some(low), Some(high)) = (
        seen.iter().map(|range| range.start).min(),
        seen.iter().map(|range| range.end).max(),
    ) else {
        return;
    };
    let (rows, head_dim, span) = (seen.len(), queries.len() / seen.len(), high - low);
    weights.resize(rows * span, 0.0);
    let (keys, values) = (&keys[low * head_dim..], &values[low * head_dim..]);
    // SAFETY: each matrix's pointer, dimensions and strides describe a slice that holds it:
    // `queries` `[rows, head_dim]`, `keys` from `low` `[span, head_dim]` read transposed,
    // `weights` `[rows, span]`, `values` from `low` `[span, head_dim]`, `output` `[rows,
    // head_dim]`; `high` is at most the positions held.
    unsafe {
        matrixmultiply::sgemm(
            rows,
            head_dim,
            span,
            scale,
            queries.as_ptr(),
            head_dim as isize,
            1,
            keys.as_ptr(),
            1,
            head_dim as isize,
            0.0,
            weights.as_mut_ptr(),
            span as isize,
            1,
        );
    }
    let mut totals = [0f32; QUERY_BLOCK];
    for ((row, range), total) in weights.chunks_exact_mut(span).zip(seen).zip(&mut totals) {
        let (seen, after) = row.split_at_mut(range.end - low);
        let (before, seen) = seen.split_at_mut(range.start - low);
        *total = softmax_unnormalized(seen);
        before.fill(0.0);
        after.fill(0.0);
    }
    // SAFETY: as above.
    unsafe {
        matrixmultiply::sgemm(
            rows,
            span,
            head_dim,
            1.0,
            weights.as_ptr(),
            span as isize,
            1,
            values.as_ptr(),
            head_dim as isize,
            1,
            0.0,
            output.as_mut_ptr(),
            head_dim as isize,
            1,
        );
    }
    for (output, total) in output.chunks_exact_mut(head_dim).zip(totals) {
        let normalizer = total.recip();
        for out in output.iter_mut() {
            *out *= normalizer;
        }
    }
}

/// `e^(w - max w)` for each of `weights` in place; returns their sum.
#[inline(always)]
fn softmax_unnormalized(weights: &mut [f32]) -> f32 {
    let peak = in_lanes(weights, f32::NEG_INFINITY, f32::max);
    for weight in weights.iter_mut() {
        *weight = exp_nonpositive(*weight - peak);
    }
    in_lanes(weights, 0.0, |sum, weight| sum + weight)
}

/// One head's query over `keys` and `values` (`[length, head_dim]` each) into `output`;
/// `weights` is scratch space.
fn attend_head(
    output: &mut [f32],
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    scale: f32,
    weights: &mut Vec<f32>,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { attend_head_avx2(output, query, keys, values, scale, weights) };
        return;
    }
    attend_head_vectorized(output, query, keys, values, scale, weights);
}

/// [`attend_head`] compiled for AVX2, whose vectors are twice as wide as the x86-64 baseline's:
/// an 8,000-token prompt on the tiny fixture in 256-token chunks took 8.0 s against 11.0 s.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn attend_head_avx2(
    output: &mut [f32],
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    scale: f32,
    weights: &mut Vec<f32>,
) {
    attend_head_vectorized(output, query, keys, values, scale, weights);
}

/// The loops of [`attend_head`], written so that the compiler vectorizes them for whichever
/// instruction set the caller is compiled for.
#[inline(always)]
fn attend_head_vectorized(
    output: &mut [f32],
    query: &[f32],
    keys: &[f32],
    values: &[f32],
    scale: f32,
    weights: &mut Vec<f32>,
) {
    let head_dim = query.len();
    weights.resize(keys.len() / head_dim, 0.0);
    // Plain loops rather than iterator adapters, which the compiler may keep out of line and
    // so compile for the baseline instruction set.
    for (weight, key) in weights.iter_mut().zip(keys.chunks_exact(head_dim)) {
        *weight = dot(query, key) * scale;
    }
    let total = softmax_unnormalized(weights);
    weighted_sum(output, weights, values);
    let normalizer = total.recip();
    for out in output.iter_mut() {
        *out *= normalizer;
    }
}

/// `output = Σ weights[k] · values[k]` with `values` `[weights.len(), output.len()]`. The key loop
/// runs inside a block of 32 output dimensions, whose sums then stay in four vector registers
/// instead of being loaded and stored for every key.
#[inline(always)]
fn weighted_sum(output: &mut [f32], weights: &[f32], values: &[f32]) {
    const BLOCK: usize = 32;
    let head_dim = output.len();
    let mut start = 0;
    while start + BLOCK <= head_dim {
        let mut sums = [0f32; BLOCK];
        for (weight, value) in weights.iter().zip(values.chunks_exact(head_dim)) {
            let block = &value[start..start + BLOCK];
            for lane in 0..BLOCK {
                sums[lane] += weight * block[lane];
            }
        }
        output[start..start + BLOCK].copy_from_slice(&sums);
        start += BLOCK;
    }
    if start < head_dim {
        let tail = &mut output[start..];
        tail.fill(0.0);
        for (weight, value) in weights.iter().zip(values.chunks_exact(head_dim)) {
            for (sum, value) in tail.iter_mut().zip(&value[start..]) {
                *sum += weight * value;
            }
        }
    }
}

/// `values` folded by `combine` in eight independent lanes, so that it vectorizes, then the lanes.
#[inline(always)]
fn in_lanes(values: &[f32], start: f32, combine: impl Fn(f32, f32) -> f32) -> f32 {
    const LANES: usize = 8;
    let mut lanes = [start; LANES];
    let chunks = values.chunks_exact(LANES);
    let mut folded = start;
    for &value in chunks.remainder() {
        folded = combine(folded, value);
    }
    for chunk in chunks {
        for lane in 0..LANES {
            lanes[lane] = combine(lanes[lane], chunk[lane]);
        }
    }
    for lane in lanes {
        folded = combine(folded, lane);
    }
    folded
}

/// A dot product in eight independent lanes, so that it vectorizes.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut lanes = [0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (a, b) in a_chunks.zip(b_chunks) {
        for lane in 0..LANES {
            lanes[lane] += a[lane] * b[lane];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests;
