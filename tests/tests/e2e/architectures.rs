//! Every architecture's forward pass agrees with mlx-lm's on a random-weight checkpoint that
//! mlx-lm itself wrote (`tests/data/architectures/`, from `cargo xtask reference`): logits within
//! 1e-3 at every prompt position from one prefill, at each of the 16 greedy decode steps after
//! it, at those steps again while the sequence shares each pass with three others, and after a
//! prefix-cache restore (blocks cut from a cache, one through the SSD tier's byte format, joined
//! into a new cache that prefills only the rest). Each layout users have is loaded: mlx-community
//! (`f32`, `q4`) and the original Hugging Face one (`hf`), which shares `f32`'s reference. A
//! multimodal wrapper's variants (`gemma3`, `gemma4`, `llama4`, `mistral3`, listed under the
//! wrapper's `model_type`) load as its text model. An architecture corral does not serve yet must be
//! refused by name, never loaded wrong; one whose mlx-lm logits corral departs from on purpose
//! (Phi-3's longrope) is named with the reason and held to transformers by the toolchain test
//! instead. A model with recurrent layers (gated DeltaNet) restores
//! those from the boundary snapshot its layers recorded where the block ends (mid-chunk here,
//! as chunks of 3 positions straddle the boundaries), carried through the same SSD payload;
//! without a snapshot its blocks cannot be joined.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use corral_worker::model::{KvCache, Model, SUPPORTED_ARCHITECTURES, Segment, layer_caches_for};
use corral_worker::prefix_cache::blocks::{
    block_shape, cut, from_payload, join, snapshot, to_payload,
};
use mlx_rs::Array;
use serde_json::Value;

use crate::reference_logits::host_rows;

/// Logits reach about 10 here; f32 differs from mlx-lm only by summation order.
const TOLERANCE: f32 = 1e-3;

/// Architectures whose mlx-lm logits corral departs from on purpose, with the reason; the
/// toolchain test holds them to transformers' instead, alone, in a batch and after a restore.
const DEPART_FROM_MLX_LM: &[(&str, &str)] = &[(
    "phi3",
    "longrope rotates the positions before original_max_position_embeddings with the short \
     factors, as transformers does; mlx-lm always uses the long ones",
)];

struct Variant {
    model_type: String,
    /// The variant whose `reference.safetensors` holds this one's logits.
    reference: String,
}

pub(crate) struct Reference {
    pub(crate) prompt: Vec<u32>,
    decoded: Vec<u32>,
    /// `[prompt + decoded, vocab]`.
    pub(crate) rows: Vec<Vec<f32>>,
}

pub(crate) fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/architectures")
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

/// Asserts `got` is within [`TOLERANCE`] of `want`; returns the largest difference.
fn assert_close(name: &str, what: &str, got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "{name} {what}: vocabulary size");
    let worst = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
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
        }];
        for (tokens, cache) in other_tokens.iter().zip(other_caches.iter_mut()) {
            segments.push(Segment { tokens, cache });
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
    let mut cache = join(&[first, &second], snapshot.as_deref(), model.new_cache()).unwrap();
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
        join(&[&block], None, model.new_cache()).is_err(),
        "{name}: KV blocks alone were joined into a cache with recurrent layers"
    );
}

#[test]
fn every_architecture_matches_mlx_lm_alone_in_a_batch_and_after_a_restore() {
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(data().join("index.json")).unwrap()).unwrap();
    let architectures: BTreeMap<String, BTreeMap<String, Variant>> = index["architectures"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(architecture, variants)| {
            let variants = variants
                .as_object()
                .unwrap()
                .iter()
                .map(|(variant, entry)| {
                    let text = |key: &str| entry[key].as_str().unwrap().to_owned();
                    let entry = Variant {
                        model_type: text("model_type"),
                        reference: text("reference"),
                    };
                    (variant.clone(), entry)
                })
                .collect();
            (architecture.clone(), variants)
        })
        .collect();
    let mut checked = Vec::new();
    for (architecture, variants) in &architectures {
        for (variant, entry) in variants {
            let name = format!("{architecture}/{variant}");
            let dir = data().join(architecture).join(variant);
            if let Some((_, why)) = DEPART_FROM_MLX_LM
                .iter()
                .find(|(departing, _)| *departing == architecture.as_str())
            {
                checked.push(format!("{name}: not held to mlx-lm: {why}"));
                continue;
            }
            if !SUPPORTED_ARCHITECTURES.contains(&entry.model_type.as_str()) {
                let error = Model::load(&dir).err().map(|error| error.to_string());
                assert!(
                    error
                        .as_deref()
                        .is_some_and(|error| error.contains("unsupported model_type")),
                    "{name}: {error:?}"
                );
                continue;
            }
            let reference = read_reference(&data().join(architecture).join(&entry.reference));
            let model = Model::load(&dir).unwrap_or_else(|error| panic!("{name}: {error}"));
            assert_eq!(
                layer_caches_for(&model.config).unwrap(),
                model.layer_caches(),
                "{name}: the caches the config gives are the built layers'"
            );
            let alone = check_alone(&name, &model, &reference);
            let in_batch = check_in_batch(&name, &model, &reference);
            let restored = check_after_restore(&name, &model, &reference);
            checked.push(format!(
                "{name}: largest differences alone {alone:.1e}, in a batch {in_batch:.1e}, after a restore {restored:.1e}"
            ));
        }
    }
    eprintln!("checked against mlx-lm:\n{}", checked.join("\n"));
}
