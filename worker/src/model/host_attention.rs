//! A decode step's attention on the CPU, computed on the host for all its sequences at once.
//!
//! One new position attending over a cache of a few hundred is a few hundred thousand multiplies
//! a sequence, but MLX's CPU backend spends it in a dozen ops and two small BLAS calls per key
//! head, each with its own dispatch and packing: on the `small` f32 fixture, eight decoding
//! sequences spent about 50 ms of a 130 ms step there. Reading each sequence's evaluated cache
//! in place and computing the scores, softmax and weighted values directly takes under 5 ms.

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype};
use rayon::prelude::*;

use super::cpu_math;
use super::kv_cache::KvCache;

/// Whether a decode step of `dtype` attends on the host: f32 on MLX's CPU backend. Metal and
/// CUDA run attention in fused kernels.
pub(crate) fn applies(dtype: Dtype) -> bool {
    dtype == Dtype::Float32 && cpu_math::on_cpu()
}

/// `queries` is `[rows, heads, 1, head_dim]`, one new rotated position per row, whose keys and
/// values are already the last of `caches[row]`. Returns `[1, rows, heads * head_dim]`, or
/// `None` where a cache or the queries are not row-major f32 buffers the host can read.
pub(crate) fn attend(
    queries: &Array,
    caches: &[&mut KvCache],
    heads: usize,
    kv_heads: usize,
    scale: f32,
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
    let head_dim = queries.dim(-1) as usize;
    let shape = Heads {
        heads,
        kv_heads,
        head_dim,
        scale,
    };
    let mut cached = Vec::with_capacity(caches.len());
    for (cache, (keys, values)) in caches.iter().zip(&buffers) {
        let capacity = keys.dim(2) as usize;
        let (Ok(keys), Ok(values)) = (keys.try_as_slice::<f32>(), values.try_as_slice::<f32>())
        else {
            return Ok(None);
        };
        if keys.len() != kv_heads * capacity * head_dim || values.len() != keys.len() {
            return Ok(None);
        }
        cached.push(CachedHeads {
            keys,
            values,
            capacity,
            length: cache.offset() as usize,
        });
    }
    let Ok(queries) = queries.try_as_slice::<f32>() else {
        return Ok(None);
    };
    let output = attend_one_position(queries, &cached, shape);
    let rows = caches.len() as i32;
    Ok(Some(Array::from_slice(
        &output,
        &[1, rows, (heads * head_dim) as i32],
    )))
}

/// One sequence's cached keys and values: `[kv_heads, capacity, head_dim]` row-major, of which
/// the first `length` positions of each head are filled.
pub(crate) struct CachedHeads<'a> {
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub capacity: usize,
    pub length: usize,
}

/// The shape of the heads.
#[derive(Clone, Copy)]
pub(crate) struct Heads {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
}

/// `queries` is `[rows, heads, head_dim]`, one new (rotated) position per row, whose keys and
/// values are already the last of `caches[row]`. Returns `[rows, heads * head_dim]`.
pub(crate) fn attend_one_position(
    queries: &[f32],
    caches: &[CachedHeads<'_>],
    shape: Heads,
) -> Vec<f32> {
    let width = shape.heads * shape.head_dim;
    let mut output = vec![0f32; caches.len() * width];
    output
        .par_chunks_mut(width)
        .zip(queries.par_chunks(width))
        .zip(caches.par_iter())
        .for_each(|((output, queries), cache)| attend_row(output, queries, cache, shape));
    output
}

fn attend_row(output: &mut [f32], queries: &[f32], cache: &CachedHeads<'_>, shape: Heads) {
    let Heads {
        heads,
        kv_heads,
        head_dim,
        scale,
    } = shape;
    let group = heads / kv_heads;
    let mut weights = vec![0f32; cache.length];
    for (head, (output, query)) in output
        .chunks_exact_mut(head_dim)
        .zip(queries.chunks_exact(head_dim))
        .enumerate()
    {
        let start = head / group * cache.capacity * head_dim;
        let filled = start..start + cache.length * head_dim;
        let keys = cache.keys[filled.clone()].chunks_exact(head_dim);
        for (weight, key) in weights.iter_mut().zip(keys) {
            *weight = dot(query, key) * scale;
        }
        let peak = weights.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0;
        for weight in &mut weights {
            *weight = (*weight - peak).exp();
            total += *weight;
        }
        let values = cache.values[filled].chunks_exact(head_dim);
        for (weight, value) in weights.iter().zip(values) {
            for (out, value) in output.iter_mut().zip(value) {
                *out += weight * value;
            }
        }
        let normalizer = total.recip();
        for out in output.iter_mut() {
            *out *= normalizer;
        }
    }
}

/// A dot product in eight independent lanes, so that it vectorizes.
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
mod tests {
    use mlx_rs::Array;
    use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
    use mlx_rs::ops::indexing::IndexOp;

    use super::*;
    use crate::model::spread_values as values;

    #[test]
    fn matches_mlx_attention_over_partly_filled_caches() {
        let shape = Heads {
            heads: 4,
            kv_heads: 2,
            head_dim: 12,
            scale: 12f32.powf(-0.5),
        };
        let (capacity, lengths) = (40, [1usize, 17, 40]);
        let kv = shape.kv_heads * capacity * shape.head_dim;
        let buffers: Vec<(Vec<f32>, Vec<f32>)> = (0..lengths.len() as u32)
            .map(|row| (values(kv, row * 2 + 11), values(kv, row * 2 + 12)))
            .collect();
        let width = shape.heads * shape.head_dim;
        let queries = values(lengths.len() * width, 5);
        let caches: Vec<CachedHeads<'_>> = buffers
            .iter()
            .zip(lengths)
            .map(|((keys, values), length)| CachedHeads {
                keys,
                values,
                capacity,
                length,
            })
            .collect();
        let host = attend_one_position(&queries, &caches, shape);
        let dims = |length: usize| {
            [
                1,
                shape.kv_heads as i32,
                length as i32,
                shape.head_dim as i32,
            ]
        };
        for (row, ((keys, values), length)) in buffers.iter().zip(lengths).enumerate() {
            let filled = |buffer: &Vec<f32>| {
                Array::from_slice(buffer, &dims(capacity)).index((.., .., ..length as i32, ..))
            };
            let query = Array::from_slice(
                &queries[row * width..(row + 1) * width],
                &[1, shape.heads as i32, 1, shape.head_dim as i32],
            );
            let expected = fast::scaled_dot_product_attention(
                &query,
                filled(keys),
                filled(values),
                shape.scale,
                None::<ScaledDotProductAttentionMask<'_>>,
                None,
            )
            .unwrap();
            for (index, (host, mlx)) in host[row * width..(row + 1) * width]
                .iter()
                .zip(expected.as_slice::<f32>())
                .enumerate()
            {
                assert!(
                    (host - mlx).abs() < 1e-5,
                    "row {row}, element {index}: {host} vs {mlx}"
                );
            }
        }
    }
}
