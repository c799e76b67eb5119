//! Blocks as MLX arrays: cut from a filled KV cache, joined back into a cache for a new
//! sequence, and turned into bytes for the SSD tier and back. Everything here runs on the engine
//! thread, like every MLX call.

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype};

use super::disk::{BlockKey, BlockShape, LayerShape};
use crate::model::{KvCache, Model};

/// One block: per cache, the keys and values of `block_tokens` positions
/// (`[1, kv_heads, block_tokens, key_dim]` and `[.., value_dim]`, the cache's own sizes).
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
/// sequence's whole buffer alive. A sliding-window layer gives what a restore at `end` or later
/// needs, zeros before it; it fails when the window already let go of that.
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

/// `cold`, a new sequence's empty caches, filled with `parts` in order (each a run of
/// positions, per layer its keys and values: whole blocks, then maybe a tail), ready to prefill
/// what follows them. Fails for a cache of a kind that blocks cannot fill (a recurrent layer's).
pub fn join(
    parts: &[&[(Array, Array)]],
    mut cold: Vec<KvCache>,
) -> Result<Vec<KvCache>, Exception> {
    for (layer, cache) in cold.iter_mut().enumerate() {
        let keys: Vec<&Array> = parts.iter().map(|part| &part[layer].0).collect();
        let values: Vec<&Array> = parts.iter().map(|part| &part[layer].1).collect();
        cache.restore(
            mlx_rs::ops::concatenate(&keys, 2)?,
            mlx_rs::ops::concatenate(&values, 2)?,
        )?;
    }
    Ok(cold)
}

/// The shape of `model`'s blocks of `block_tokens` positions: one entry per cache it keeps.
pub fn block_shape(model: &Model, block_tokens: u32) -> BlockShape {
    BlockShape {
        block_tokens,
        dtype: dtype_tag(model.dtype()),
        layers: model
            .cache_shapes()
            .into_iter()
            .map(|cache| LayerShape {
                kv_heads: cache.kv_heads as u32,
                key_dim: cache.key_dim as u32,
                value_dim: cache.value_dim as u32,
            })
            .collect(),
    }
}

/// The SSD payload: every cache's keys then values in the cache's own element type (f16 and
/// bf16 as they are, anything else as f32), in the machine's byte order, which is little-endian
/// on every platform MLX runs on. A half-precision model's blocks take half the disk an f32
/// encoding would.
pub fn to_payload(layers: &[(Array, Array)], dtype: Dtype) -> Result<Vec<u8>, Exception> {
    let stored = stored_dtype(dtype);
    let mut payload = Vec::new();
    for (keys, values) in layers {
        for array in [keys, values] {
            let bytes = array
                .as_dtype(stored)?
                .contiguous()?
                .view_dtype(Dtype::Uint8)?;
            bytes.eval()?;
            let slice = bytes
                .try_as_slice::<u8>()
                .map_err(|error| Exception::custom(format!("reading a cache block: {error}")))?;
            payload.extend_from_slice(slice);
        }
    }
    Ok(payload)
}

/// The inverse of [`to_payload`]; `None` when the payload's size does not fit `shape` in `dtype`.
pub fn from_payload(
    payload: &[u8],
    shape: &BlockShape,
    dtype: Dtype,
) -> Result<Option<Vec<(Array, Array)>>, Exception> {
    let stored = stored_dtype(dtype);
    let width = if stored == Dtype::Float32 { 4 } else { 2 };
    let expected: usize = shape
        .layers
        .iter()
        .map(|&layer| {
            let (keys, values) = shape.elements(layer);
            (keys + values) * width
        })
        .sum();
    if payload.len() != expected {
        return Ok(None);
    }
    let mut rest = payload;
    let mut layers = Vec::with_capacity(shape.layers.len());
    for &layer in &shape.layers {
        let (key_elements, value_elements) = shape.elements(layer);
        let mut array = |dim: u32, elements: usize| -> Result<Array, Exception> {
            let byte_dims = [
                1,
                layer.kv_heads as i32,
                shape.block_tokens as i32,
                (dim as usize * width) as i32,
            ];
            let (bytes, after) = rest.split_at(elements * width);
            rest = after;
            Array::from_slice(bytes, &byte_dims)
                .view_dtype(stored)?
                .as_dtype(dtype)
        };
        let keys = array(layer.key_dim, key_elements)?;
        layers.push((keys, array(layer.value_dim, value_elements)?));
    }
    Ok(Some(layers))
}

fn stored_dtype(dtype: Dtype) -> Dtype {
    match dtype {
        Dtype::Float16 | Dtype::Bfloat16 => dtype,
        _ => Dtype::Float32,
    }
}

/// The tag the SSD header stores for a cache dtype.
fn dtype_tag(dtype: Dtype) -> u8 {
    match dtype {
        Dtype::Float16 => 1,
        Dtype::Bfloat16 => 2,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use mlx_rs::random;

    use super::*;

    /// Layers of two widths, as Gemma 4's sliding and full-attention layers are, and a latent
    /// one whose values are narrower than its keys.
    fn shape() -> BlockShape {
        BlockShape {
            block_tokens: 4,
            dtype: 0,
            layers: vec![
                LayerShape {
                    kv_heads: 2,
                    key_dim: 8,
                    value_dim: 8,
                },
                LayerShape {
                    kv_heads: 1,
                    key_dim: 16,
                    value_dim: 16,
                },
                LayerShape {
                    kv_heads: 1,
                    key_dim: 12,
                    value_dim: 4,
                },
            ],
        }
    }

    fn layers(dtype: Dtype) -> Vec<(Array, Array)> {
        let seeded = |dims: &[i32], seed: u64| {
            let key = random::key(seed).unwrap();
            random::normal::<f32>(dims, None, None, Some(&key))
                .unwrap()
                .as_dtype(dtype)
                .unwrap()
        };
        (0..)
            .zip(shape().layers)
            .map(|(index, layer)| {
                let dims = |dim: u32| [1, layer.kv_heads as i32, 4, dim as i32];
                (
                    seeded(&dims(layer.key_dim), 2 * index),
                    seeded(&dims(layer.value_dim), 2 * index + 1),
                )
            })
            .collect()
    }

    #[test]
    fn every_cache_dtype_round_trips_exactly_at_its_own_width() {
        for (dtype, width) in [
            (Dtype::Float16, 2),
            (Dtype::Bfloat16, 2),
            (Dtype::Float32, 4),
        ] {
            let original = layers(dtype);
            let payload = to_payload(&original, dtype).unwrap();
            assert_eq!(
                payload.len(),
                (2 * (2 * 8 + 16) + 12 + 4) * 4 * width,
                "{dtype:?}"
            );
            let restored = from_payload(&payload, &shape(), dtype).unwrap().unwrap();
            for ((keys, values), (restored_keys, restored_values)) in original.iter().zip(&restored)
            {
                assert_eq!(restored_keys.dtype(), dtype);
                assert_eq!(restored_keys.shape(), keys.shape());
                assert!(keys.eq_values(restored_keys).unwrap());
                assert!(values.eq_values(restored_values).unwrap());
            }
        }
    }

    #[test]
    fn a_payload_of_another_width_is_refused() {
        let payload = to_payload(&layers(Dtype::Float32), Dtype::Float32).unwrap();
        assert!(
            from_payload(&payload, &shape(), Dtype::Float16)
                .unwrap()
                .is_none()
        );
        assert!(
            from_payload(&payload[1..], &shape(), Dtype::Float32)
                .unwrap()
                .is_none()
        );
    }
}
