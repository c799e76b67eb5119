//! Blocks as MLX arrays: cut from a filled KV cache, joined back into a cache for a new
//! sequence, and turned into bytes for the SSD tier and back. Everything here runs on the engine
//! thread, like every MLX call.

use std::rc::Rc;

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype};

use super::disk::{BlockKey, BlockShape};
use crate::model::KvCache;

/// One block: per layer, the keys and values of `block_tokens` positions
/// (`[1, kv_heads, block_tokens, head_dim]` each).
pub struct Block {
    pub key: BlockKey,
    pub layers: Vec<(Array, Array)>,
    pub bytes: u64,
}

impl Block {
    pub fn new(key: BlockKey, layers: Vec<(Array, Array)>) -> Self {
        let bytes = layers
            .iter()
            .map(|(keys, values)| (keys.nbytes() + values.nbytes()) as u64)
            .sum();
        Self { key, layers, bytes }
    }
}

/// Copies positions `start..end` of every layer out of `cache`, so the block does not keep the
/// sequence's whole buffer alive.
pub fn cut(cache: &[KvCache], start: i32, end: i32) -> Result<Vec<(Array, Array)>, Exception> {
    let mut layers = Vec::with_capacity(cache.len());
    for layer in cache {
        let Some((keys, values)) = layer.positions(start, end) else {
            return Err(Exception::custom(
                "the cache does not hold the block's positions",
            ));
        };
        let (keys, values) = (keys.contiguous()?, values.contiguous()?);
        keys.eval()?;
        values.eval()?;
        layers.push((keys, values));
    }
    Ok(layers)
}

/// A cache holding `blocks` in order, ready to prefill what follows them.
pub fn join(blocks: &[Rc<Block>], layers: usize) -> Result<Vec<KvCache>, Exception> {
    (0..layers)
        .map(|layer| {
            let keys: Vec<&Array> = blocks.iter().map(|block| &block.layers[layer].0).collect();
            let values: Vec<&Array> = blocks.iter().map(|block| &block.layers[layer].1).collect();
            Ok(KvCache::from_prefix(
                mlx_rs::ops::concatenate(&keys, 2)?,
                mlx_rs::ops::concatenate(&values, 2)?,
            ))
        })
        .collect()
}

/// The SSD payload: every layer's keys then values, as little-endian f32 (exact for f16, bf16
/// and f32 caches alike, so one format serves every model).
pub fn to_payload(layers: &[(Array, Array)]) -> Result<Vec<u8>, Exception> {
    let mut payload = Vec::new();
    for (keys, values) in layers {
        for array in [keys, values] {
            let floats = array.as_dtype(Dtype::Float32)?.contiguous()?;
            floats.eval()?;
            for value in floats
                .try_as_slice::<f32>()
                .map_err(|error| Exception::custom(format!("reading a cache block: {error}")))?
            {
                payload.extend_from_slice(&value.to_le_bytes());
            }
        }
    }
    Ok(payload)
}

/// The inverse of [`to_payload`], back in the cache's `dtype`; `None` when the payload's size does
/// not fit `shape`.
pub fn from_payload(
    payload: &[u8],
    shape: &BlockShape,
    dtype: Dtype,
) -> Result<Option<Vec<(Array, Array)>>, Exception> {
    let dims = [
        1,
        shape.kv_heads as i32,
        shape.block_tokens as i32,
        shape.head_dim as i32,
    ];
    let per_array = (shape.kv_heads * shape.block_tokens * shape.head_dim) as usize;
    if payload.len() != per_array * 4 * 2 * shape.layers as usize {
        return Ok(None);
    }
    let floats: Vec<f32> = payload
        .chunks_exact(4)
        .map(|bytes| f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
        .collect();
    let array = |index: usize| -> Result<Array, Exception> {
        let slice = &floats[index * per_array..(index + 1) * per_array];
        Array::from_slice(slice, &dims).as_dtype(dtype)
    };
    (0..shape.layers as usize)
        .map(|layer| Ok((array(2 * layer)?, array(2 * layer + 1)?)))
        .collect::<Result<Vec<_>, Exception>>()
        .map(Some)
}

/// The tag the SSD header stores for a cache dtype.
pub fn dtype_tag(dtype: Dtype) -> u8 {
    match dtype {
        Dtype::Float16 => 1,
        Dtype::Bfloat16 => 2,
        _ => 0,
    }
}
