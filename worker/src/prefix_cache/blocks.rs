//! Blocks as MLX arrays: cut from a filled cache, joined back into a cache for a new sequence,
//! and turned into bytes for the SSD tier and back. A block holds the keys and values of every
//! key/value layer, and for a model with recurrent layers maybe a boundary snapshot: each
//! recurrent layer's state after the block's last position. Everything here runs on the engine
//! thread, like every MLX call.

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype};

use super::disk::{BlockKey, BlockShape, LayerShape};
use crate::model::{KvCache, Model, RecurrentState};

/// One block: per key/value cache, the keys and values of `block_tokens` positions
/// (`[1, kv_heads, block_tokens, key_dim]` and `[.., value_dim]`, the cache's own sizes); per
/// recurrent cache, when the block was kept with one, its state at the block's end.
pub struct Block {
    pub key: BlockKey,
    pub layers: Vec<(Array, Array)>,
    pub snapshot: Option<Vec<RecurrentState>>,
    pub bytes: u64,
}

impl Block {
    pub fn new(
        key: BlockKey,
        layers: Vec<(Array, Array)>,
        snapshot: Option<Vec<RecurrentState>>,
    ) -> Self {
        let kv: u64 = layers
            .iter()
            .map(|(keys, values)| (keys.nbytes() + values.nbytes()) as u64)
            .sum();
        let bytes = kv + snapshot.as_deref().map_or(0, snapshot_bytes);
        Self {
            key,
            layers,
            snapshot,
            bytes,
        }
    }
}

/// Bytes of a boundary snapshot: every recurrent layer's arrays.
pub fn snapshot_bytes(snapshot: &[RecurrentState]) -> u64 {
    snapshot.iter().map(RecurrentState::bytes).sum()
}

/// Copies positions `start..end` of every key/value layer out of `cache`, so the block does not
/// keep the sequence's whole buffer alive; recurrent layers hold no positions and are skipped
/// (their state goes in a snapshot). A sliding-window layer gives what a restore at `end` or
/// later needs, zeros before it; it fails when the window already let go of that.
pub fn cut(cache: &[KvCache], start: i32, end: i32) -> Result<Vec<(Array, Array)>, Exception> {
    let mut layers = Vec::with_capacity(cache.len());
    for layer in cache.iter().filter(|layer| layer.restores_from_blocks()) {
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

/// Every recurrent layer's state recorded at position `end`, evaluated; `None` when the model has
/// no recurrent layer or one of them recorded none there.
pub fn snapshot(cache: &[KvCache], end: i32) -> Result<Option<Vec<RecurrentState>>, Exception> {
    let mut states = Vec::new();
    for layer in cache.iter().filter(|layer| !layer.restores_from_blocks()) {
        let Some(state) = layer.snapshot_at(end) else {
            return Ok(None);
        };
        for array in state.slots().into_iter().flatten() {
            array.eval()?;
        }
        states.push(state.clone());
    }
    Ok((!states.is_empty()).then_some(states))
}

/// Every recurrent layer's state after its last position, evaluated, when that is position `end`;
/// `None` otherwise (a layer has seen more or fewer).
pub fn states_at_end(
    cache: &[KvCache],
    end: i32,
) -> Result<Option<Vec<RecurrentState>>, Exception> {
    let mut states = Vec::new();
    for layer in cache.iter().filter(|layer| !layer.restores_from_blocks()) {
        let Some(state) = layer.recurrent_state().filter(|_| layer.offset() == end) else {
            return Ok(None);
        };
        for array in state.slots().into_iter().flatten() {
            array.eval()?;
        }
        states.push(state.clone());
    }
    Ok(Some(states))
}

/// Fills `cold`, a new sequence's empty caches, with `parts` in order (each a run of positions,
/// per key/value layer its keys and values: whole blocks, then maybe a tail), ready to prefill
/// what follows them. Recurrent layers take `snapshot`, their states at the end of the parts;
/// without one, a cache with a recurrent layer cannot be filled.
pub fn join(
    parts: &[&[(Array, Array)]],
    snapshot: Option<&[RecurrentState]>,
    cold: &mut [KvCache],
) -> Result<(), Exception> {
    let positions: i32 = parts
        .iter()
        .filter_map(|part| part.first())
        .map(|(keys, _)| keys.dim(2))
        .sum();
    let (mut kv_layer, mut recurrent_layer) = (0, 0);
    for cache in cold {
        if cache.restores_from_blocks() {
            let keys: Vec<&Array> = parts.iter().map(|part| &part[kv_layer].0).collect();
            let values: Vec<&Array> = parts.iter().map(|part| &part[kv_layer].1).collect();
            cache.restore(
                mlx_rs::ops::concatenate(&keys, 2)?,
                mlx_rs::ops::concatenate(&values, 2)?,
            )?;
            kv_layer += 1;
        } else {
            let Some(state) = snapshot.and_then(|states| states.get(recurrent_layer)) else {
                return Err(Exception::custom(
                    "a recurrent layer's state is not in key/value blocks and no snapshot was given",
                ));
            };
            cache.restore_recurrent(state.clone(), positions)?;
            recurrent_layer += 1;
        }
    }
    Ok(())
}

/// The shape of `model`'s blocks of `block_tokens` positions: one entry per key/value cache this
/// process fills, and how many recurrent caches a snapshot holds.
pub fn block_shape(model: &Model, block_tokens: u32) -> BlockShape {
    let filled = model.filled_caches();
    let caches = &model.new_cache()[filled.clone()];
    BlockShape {
        block_tokens,
        dtype: dtype_tag(model.dtype()),
        recurrent_layers: caches
            .iter()
            .filter(|cache| !cache.restores_from_blocks())
            .count() as u32,
        layers: model.cache_shapes()[filled]
            .iter()
            .zip(caches)
            .filter(|(_, cache)| cache.restores_from_blocks())
            .map(|(cache, _)| LayerShape {
                kv_heads: cache.kv_heads as u32,
                key_dim: cache.key_dim as u32,
                value_dim: cache.value_dim as u32,
            })
            .collect(),
    }
}

/// The SSD payload: every key/value cache's keys then values in the cache's own element type
/// (f16 and bf16 as they are, anything else as f32), in the machine's byte order, which is
/// little-endian on every platform MLX runs on. A half-precision model's blocks take half the
/// disk an f32 encoding would. Then a snapshot marker (0 or 1) and, with a snapshot, per
/// recurrent layer per state slot: present (0 or 1), then its dtype tag, rank, dims (u32 each)
/// and elements.
pub fn to_payload(
    layers: &[(Array, Array)],
    snapshot: Option<&[RecurrentState]>,
    dtype: Dtype,
) -> Result<Vec<u8>, Exception> {
    let stored = stored_dtype(dtype);
    let mut payload = Vec::new();
    for (keys, values) in layers {
        for array in [keys, values] {
            append_elements(&mut payload, array, stored)?;
        }
    }
    payload.push(u8::from(snapshot.is_some()));
    for state in snapshot.unwrap_or_default() {
        for slot in state.slots() {
            payload.push(u8::from(slot.is_some()));
            let Some(array) = slot else {
                continue;
            };
            let stored = stored_dtype(array.dtype());
            payload.push(dtype_tag(stored));
            payload.push(array.ndim() as u8);
            for &dim in array.shape() {
                payload.extend_from_slice(&(dim as u32).to_le_bytes());
            }
            append_elements(&mut payload, array, stored)?;
        }
    }
    Ok(payload)
}

fn append_elements(payload: &mut Vec<u8>, array: &Array, stored: Dtype) -> Result<(), Exception> {
    let bytes = array
        .as_dtype(stored)?
        .contiguous()?
        .view_dtype(Dtype::Uint8)?;
    bytes.eval()?;
    let slice = bytes
        .try_as_slice::<u8>()
        .map_err(|error| Exception::custom(format!("reading a cache block: {error}")))?;
    payload.extend_from_slice(slice);
    Ok(())
}

/// A block's arrays: per key/value cache its keys and values, and maybe a boundary snapshot.
pub type BlockArrays = (Vec<(Array, Array)>, Option<Vec<RecurrentState>>);

/// The inverse of [`to_payload`]; `None` when the payload does not fit `shape` in `dtype`.
pub fn from_payload(
    payload: &[u8],
    shape: &BlockShape,
    dtype: Dtype,
) -> Result<Option<BlockArrays>, Exception> {
    let stored = stored_dtype(dtype);
    let width = element_width(stored);
    let kv_len: usize = shape
        .layers
        .iter()
        .map(|&layer| {
            let (keys, values) = shape.elements(layer);
            (keys + values) * width
        })
        .sum();
    let Some((mut rest, snapshot_part)) = split_checked(payload, kv_len) else {
        return Ok(None);
    };
    let mut layers = Vec::with_capacity(shape.layers.len());
    for &layer in &shape.layers {
        let (key_elements, value_elements) = shape.elements(layer);
        let mut array = |dim: u32, elements: usize| -> Result<Array, Exception> {
            let dims = [
                1,
                layer.kv_heads as i32,
                shape.block_tokens as i32,
                dim as i32,
            ];
            let (bytes, after) = rest.split_at(elements * width);
            rest = after;
            array_from(bytes, stored, &dims)?.as_dtype(dtype)
        };
        let keys = array(layer.key_dim, key_elements)?;
        layers.push((keys, array(layer.value_dim, value_elements)?));
    }
    let mut reader = Reader(snapshot_part);
    let snapshot = match reader.byte() {
        Some(0) => None,
        Some(1) => {
            let mut states = Vec::with_capacity(shape.recurrent_layers as usize);
            for _ in 0..shape.recurrent_layers {
                let mut slots: [Option<Array>; RecurrentState::SLOTS] = Default::default();
                for slot in &mut slots {
                    match reader.byte() {
                        Some(0) => {}
                        Some(1) => match reader.array()? {
                            Some(array) => *slot = Some(array),
                            None => return Ok(None),
                        },
                        _ => return Ok(None),
                    }
                }
                states.push(RecurrentState::from_slots(slots));
            }
            Some(states)
        }
        _ => return Ok(None),
    };
    if !reader.0.is_empty() {
        return Ok(None);
    }
    Ok(Some((layers, snapshot)))
}

fn split_checked(bytes: &[u8], at: usize) -> Option<(&[u8], &[u8])> {
    (bytes.len() >= at).then(|| bytes.split_at(at))
}

fn array_from(bytes: &[u8], stored: Dtype, dims: &[i32]) -> Result<Array, Exception> {
    Array::from_slice(bytes, &[bytes.len() as i32])
        .view_dtype(stored)?
        .reshape(dims)
}

/// Reads a snapshot's fields front to back; `None` past the end.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, count: usize) -> Option<&[u8]> {
        let (head, rest) = split_checked(self.0, count)?;
        self.0 = rest;
        Some(head)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|byte| byte[0])
    }

    /// One array as [`to_payload`] writes it; `None` when the bytes do not make one.
    fn array(&mut self) -> Result<Option<Array>, Exception> {
        let (Some(tag), Some(rank)) = (self.byte(), self.byte()) else {
            return Ok(None);
        };
        let Some(stored) = dtype_of_tag(tag) else {
            return Ok(None);
        };
        let mut dims = Vec::with_capacity(rank as usize);
        for _ in 0..rank {
            let Some(dim) = self.take(4) else {
                return Ok(None);
            };
            let dim = u32::from_le_bytes([dim[0], dim[1], dim[2], dim[3]]);
            let Ok(dim) = i32::try_from(dim) else {
                return Ok(None);
            };
            dims.push(dim);
        }
        let elements = dims
            .iter()
            .try_fold(1usize, |product, &dim| product.checked_mul(dim as usize));
        let Some(len) = elements.and_then(|elements| elements.checked_mul(element_width(stored)))
        else {
            return Ok(None);
        };
        if len == 0 {
            return Ok(None);
        }
        let Some(bytes) = self.take(len) else {
            return Ok(None);
        };
        array_from(bytes, stored, &dims).map(Some)
    }
}

fn stored_dtype(dtype: Dtype) -> Dtype {
    match dtype {
        Dtype::Float16 | Dtype::Bfloat16 => dtype,
        _ => Dtype::Float32,
    }
}

fn element_width(stored: Dtype) -> usize {
    if stored == Dtype::Float32 { 4 } else { 2 }
}

/// The tag the SSD header (and a snapshot's array) stores for an element type.
fn dtype_tag(dtype: Dtype) -> u8 {
    match dtype {
        Dtype::Float16 => 1,
        Dtype::Bfloat16 => 2,
        _ => 0,
    }
}

fn dtype_of_tag(tag: u8) -> Option<Dtype> {
    match tag {
        0 => Some(Dtype::Float32),
        1 => Some(Dtype::Float16),
        2 => Some(Dtype::Bfloat16),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
