//! The checks a model's logits meet against a checkpoint's reference (`reference.safetensors`:
//! prompt, greedy decode tokens, every row's logits): alone (the prompt in one pass, then each
//! decode step), in a batch (each decode step beside three other sequences, one of them
//! prefilling), and after a prefix-cache restore (blocks cut from a cache, one through the SSD
//! tier's byte format, joined into a new cache that prefills only the rest; a model with
//! recurrent layers restores those from the boundary snapshot its layers recorded where the block
//! ends, mid-chunk, and without a snapshot its blocks cannot be joined).

use std::path::Path;

use corral_worker::model::{KvCache, Model, Segment};
use corral_worker::prefix_cache::blocks::{
    block_shape, cut, from_payload, join, snapshot, to_payload,
};
use mlx_rs::Array;

use crate::reference_logits::host_rows;

/// Float32 on both sides, summed in another order.
const TOLERANCE: f32 = 1e-3;

pub(crate) struct Reference {
    pub(crate) prompt: Vec<u32>,
    decoded: Vec<u32>,
    /// `[prompt + decoded, vocab]`.
    pub(crate) rows: Vec<Vec<f32>>,
}

pub(crate) fn read_reference(dir: &Path) -> Reference {
    let tensors = Array::load_safetensors(dir.join("reference.safetensors")).unwrap();
    let ids = |name: &str| -> Vec<u32> {
        let array = tensors[name].as_dtype(mlx_rs::Dtype::Int32).unwrap();
        array
            .as_slice::<i32>()
            .iter()
            .map(|&id| id as u32)
            .collect()
    };
    Reference {
        prompt: ids("prompt"),
        decoded: ids("decoded"),
        rows: host_rows(&tensors["logits"]),
    }
}

fn last_row(model: &Model, tokens: &[u32], cache: &mut [KvCache]) -> Vec<f32> {
    let hidden = model.hidden_states(tokens, cache).unwrap();
    let rows = host_rows(&model.logits(&hidden).unwrap());
    rows.last().unwrap().clone()
}

/// The largest difference between two rows of logits.
pub(crate) fn worst_difference(got: &[f32], want: &[f32]) -> f32 {
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max)
}

/// Asserts `got` is within [`TOLERANCE`] of `want`; returns the largest difference.
fn assert_close(name: &str, what: &str, got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "{name} {what}: vocabulary size");
    let worst = worst_difference(got, want);
    assert!(
        worst <= TOLERANCE,
        "{name} {what}: differs from the reference by {worst} (tolerance {TOLERANCE})"
    );
    worst
}

/// corral's logits for the reference's rows: the prompt in one pass, then the reference's
/// decode tokens one at a time.
pub(crate) fn rows_alone(model: &Model, reference: &Reference) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache();
    let hidden = model.hidden_states(&reference.prompt, &mut cache).unwrap();
    let mut rows = host_rows(&model.logits(&hidden).unwrap());
    for &token in &reference.decoded {
        rows.push(last_row(model, &[token], &mut cache));
    }
    rows
}

/// The prompt in one pass, then the reference's decode tokens one at a time; returns the
/// largest difference.
pub(crate) fn check_alone(name: &str, model: &Model, reference: &Reference) -> f32 {
    let prompt = reference.prompt.len();
    let mut worst = 0.0f32;
    for (index, row) in rows_alone(model, reference).iter().enumerate() {
        let what = match index.checked_sub(prompt) {
            None => format!("prompt position {index}"),
            Some(step) => format!("decode step {step}"),
        };
        worst = worst.max(assert_close(name, &what, row, &reference.rows[index]));
    }
    worst
}

/// The same decode steps, each in one pass with three other sequences of other prompts (one
/// prefilling beside the decode rows), so the sequence's logits must not depend on its batch;
/// returns the largest difference.
pub(crate) fn check_in_batch(name: &str, model: &Model, reference: &Reference) -> f32 {
    let mut worst = 0.0f32;
    let others: Vec<Vec<u32>> = (1..4u32)
        .map(|shift| {
            let vocab = reference.rows[0].len() as u32;
            let length = 5 + 3 * shift as usize;
            (0..length as u32)
                .map(|i| (i * 7 + shift * 13) % vocab)
                .collect()
        })
        .collect();
    let mut own = model.new_cache();
    last_row(model, &reference.prompt, &mut own);
    let mut other_caches: Vec<Vec<KvCache>> = others.iter().map(|_| model.new_cache()).collect();
    for (cache, prompt) in other_caches.iter_mut().zip(&others) {
        last_row(model, &prompt[..prompt.len() - 1], cache);
    }
    let prompt = reference.prompt.len();
    for (step, &token) in reference.decoded.iter().enumerate() {
        let other_tokens: Vec<Vec<u32>> = others
            .iter()
            .enumerate()
            .map(|(index, prompt)| match (index, step) {
                // The first other sequence prefills its whole prompt again in a fresh cache
                // beside the first decode step, as a newly admitted request does.
                (0, 0) => prompt.clone(),
                _ => vec![prompt[(step + index) % prompt.len()]],
            })
            .collect();
        if step == 0 {
            other_caches[0] = model.new_cache();
        }
        let own_tokens = [token];
        let mut segments = vec![Segment {
            tokens: &own_tokens,
            cache: &mut own,
            embedded: Vec::new(),
        }];
        for (tokens, cache) in other_tokens.iter().zip(other_caches.iter_mut()) {
            segments.push(Segment {
                tokens,
                cache,
                embedded: Vec::new(),
            });
        }
        // Decode rows first, as the batch packs them.
        segments.sort_by_key(|segment| segment.tokens.len());
        let hidden = model.packed_hidden_states(&mut segments).unwrap();
        let rows = host_rows(&model.logits(&hidden).unwrap());
        let what = format!("decode step {step} in a batch of 4");
        worst = worst.max(assert_close(
            name,
            &what,
            &rows[0],
            &reference.rows[prompt + step],
        ));
    }
    worst
}

/// Prompt positions per restored block.
const BLOCK_TOKENS: i32 = 8;

/// Prompt positions per prefill chunk: two chunks make a block, as a sequence prefills.
const CHUNK_TOKENS: usize = 4;

/// A recurrent model's chunks: a block's end falls inside a chunk, where its layers must record
/// their state mid-chunk.
const RECURRENT_CHUNK_TOKENS: usize = 3;

/// The prompt's first two blocks restored as the prefix cache restores them (the second through
/// the SSD payload), the rest of the prompt prefilled after them, then the decode steps. The
/// blocks are cut as a sequence cuts them, each after the chunk that completes it, from a cache
/// that keeps positions from the prompt's last whole block on: a sliding window has let go of
/// earlier ones by then.
pub(crate) fn check_after_restore(name: &str, model: &Model, reference: &Reference) -> f32 {
    let mut worst = 0.0f32;
    let mut cold = model.new_cache();
    let recurrent = !cold.iter().all(KvCache::restores_from_blocks);
    if recurrent {
        check_restore_refused_without_snapshot(name, model, reference);
    }
    let last_block = reference.prompt.len() as i32 / BLOCK_TOKENS * BLOCK_TOKENS;
    for layer in &mut cold {
        layer.keep_from(last_block);
        layer.snapshot_every(BLOCK_TOKENS);
    }
    let mut blocks = Vec::new();
    let mut snapshots = Vec::new();
    let mut end = 0;
    let chunk_tokens = if recurrent {
        RECURRENT_CHUNK_TOKENS
    } else {
        CHUNK_TOKENS
    };
    for chunk in reference.prompt.chunks(chunk_tokens) {
        last_row(model, chunk, &mut cold);
        let reached = end + chunk.len() as i32;
        // Each block is cut after the chunk that completes it, as a sequence cuts it.
        for boundary in (end + 1..=reached).filter(|position| position % BLOCK_TOKENS == 0) {
            if blocks.len() < 2 {
                blocks.push(cut(&cold, boundary - BLOCK_TOKENS, boundary).unwrap());
                snapshots.push(snapshot(&cold, boundary).unwrap());
            }
        }
        end = reached;
    }
    assert_eq!(
        snapshots[1].is_some(),
        recurrent,
        "{name}: a snapshot exactly when the model has recurrent layers"
    );
    let (first, second) = (&blocks[0], &blocks[1]);
    let shape = block_shape(model, BLOCK_TOKENS as u32);
    let payload = to_payload(second, snapshots[1].as_deref(), model.dtype()).unwrap();
    let (second, snapshot) = from_payload(&payload, &shape, model.dtype())
        .unwrap()
        .unwrap_or_else(|| panic!("{name}: the payload does not fit the block shape"));
    let mut cache = model.new_cache();
    join(&[first, &second], snapshot.as_deref(), &mut cache).unwrap();
    let restored = 2 * BLOCK_TOKENS as usize;
    let hidden = model
        .hidden_states(&reference.prompt[restored..], &mut cache)
        .unwrap();
    let rows = host_rows(&model.logits(&hidden).unwrap());
    for (index, row) in rows.iter().enumerate() {
        let position = restored + index;
        let what = format!("prompt position {position} after a restore");
        worst = worst.max(assert_close(name, &what, row, &reference.rows[position]));
    }
    let prompt = reference.prompt.len();
    for (step, &token) in reference.decoded.iter().enumerate() {
        let row = last_row(model, &[token], &mut cache);
        let what = format!("decode step {step} after a restore");
        worst = worst.max(assert_close(
            name,
            &what,
            &row,
            &reference.rows[prompt + step],
        ));
    }
    worst
}

/// A model with a recurrent layer whose cache recorded no snapshot: blocks of the right shape
/// for its attention layers alone cannot be joined into a new cache.
fn check_restore_refused_without_snapshot(name: &str, model: &Model, reference: &Reference) {
    let mut cache = model.new_cache();
    last_row(model, &reference.prompt, &mut cache);
    let block = cut(&cache, 0, BLOCK_TOKENS).unwrap();
    assert!(
        snapshot(&cache, BLOCK_TOKENS).unwrap().is_none(),
        "{name}: a snapshot nobody asked for"
    );
    assert!(
        join(&[&block], None, &mut model.new_cache()).is_err(),
        "{name}: KV blocks alone were joined into a cache with recurrent layers"
    );
}

/// The largest difference between corral's rows and the reference's.
pub(crate) fn largest_difference(rows: &[Vec<f32>], reference: &Reference) -> f32 {
    rows.iter()
        .zip(&reference.rows)
        .flat_map(|(got, want)| got.iter().zip(want).map(|(a, b)| (a - b).abs()))
        .fold(0.0, f32::max)
}

/// A 4-bit layout held to a float reference: the noise is what quantization moves the logits
/// over the prompt, where both read the same tokens; at each greedy step whose reference lead
/// is above twice that noise, corral picks the reference's token. Returns the steps compared,
/// or what failed.
pub(crate) fn check_quantized(
    name: &str,
    rows: &[Vec<f32>],
    reference: &Reference,
    bound: f32,
) -> Result<usize, String> {
    let prompt = reference.prompt.len();
    let noise = largest_difference(&rows[..prompt], reference);
    if noise > bound {
        return Err(format!(
            "{name}: quantization moves the logits by {noise} (bound {bound})"
        ));
    }
    let mut compared = 0;
    let greedy_rows = rows.iter().zip(&reference.rows).enumerate();
    for (step, (got, want)) in greedy_rows.take(rows.len() - 1).skip(prompt - 1) {
        let mut sorted = want.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        if sorted[0] - sorted[1] <= 2.0 * noise {
            continue;
        }
        compared += 1;
        if argmax(got) != argmax(want) {
            return Err(format!(
                "{name}: greedy token at row {step} (lead {} over noise {noise})",
                sorted[0] - sorted[1]
            ));
        }
    }
    Ok(compared)
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(index, _)| index)
        .unwrap()
}
