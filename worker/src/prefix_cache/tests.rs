//! A restored prefix (whole blocks, then part of a tail) continues exactly as a cold prefill of
//! the same prompt: the logits of the prompt's last position agree, also for a model whose
//! layers cache keys of different sizes or none at all, or (latent attention) values narrower
//! than their keys, through the SSD tier, and for a model with recurrent layers restored from a
//! boundary snapshot.

use std::sync::Arc;

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use mlx_rs::ops::indexing::IndexOp;

use super::{PrefixCache, PrefixCacheOptions, PrefixCounters, Restored};
use crate::loaded::LoadedModel;
use crate::model::{Model, Segment};
use crate::sequence::host_rows;

const TOLERANCE: f32 = 1e-4;
const BLOCK_TOKENS: usize = 4;

fn tiny_llama() -> (tempfile::TempDir, LoadedModel) {
    let dir = tempfile::tempdir().unwrap();
    let options = FixtureOptions {
        size: Size::Tiny,
        arch: Arch::Llama,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    corral_fixture::generate(&options, dir.path()).unwrap();
    let loaded = LoadedModel::load(dir.path()).unwrap();
    (dir, loaded)
}

/// transformers' tiny Gemma 4 (`tests/data/toolchain/gemma4_text/hf`: a sliding layer of 1 kv
/// head of 16, a full one of 1 head of 32, and two layers that share their keys and values),
/// with the tiny Llama's tokenizer, which the cache never reads.
fn tiny_gemma4() -> (tempfile::TempDir, LoadedModel) {
    tiny_reference("gemma4_text/hf")
}

/// transformers' tiny Qwen3.5 (`tests/data/toolchain/qwen3_5/hf`: two gated DeltaNet layers,
/// two attention layers), with the tiny Llama's tokenizer.
fn tiny_qwen3_5() -> (tempfile::TempDir, LoadedModel) {
    tiny_reference("qwen3_5/hf")
}

/// A checkpoint of `tests/data/toolchain/` with the tiny Llama's tokenizer.
fn tiny_reference(checkpoint: &str) -> (tempfile::TempDir, LoadedModel) {
    let (dir, _) = tiny_llama();
    let checkpoint = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/toolchain")
        .join(checkpoint);
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(checkpoint.join(file), dir.path().join(file)).unwrap();
    }
    let loaded = LoadedModel::load(dir.path()).unwrap();
    (dir, loaded)
}

fn ram_only(loaded: &LoadedModel) -> PrefixCache {
    with_disk(loaded, None)
}

fn with_disk(loaded: &LoadedModel, disk_root: Option<&std::path::Path>) -> PrefixCache {
    let options = PrefixCacheOptions {
        block_tokens: BLOCK_TOKENS,
        ram_bytes: 64 << 20,
        disk_root: disk_root.map(std::path::Path::to_path_buf),
        disk_bytes: 64 << 20,
        snapshot_every: 4,
    };
    PrefixCache::open(loaded, &options, Arc::new(PrefixCounters::default())).unwrap()
}

fn last_logits(model: &Model, tokens: &[u32], cache: &mut [crate::model::KvCache]) -> Vec<f32> {
    let hidden = model.hidden_states(tokens, cache).unwrap();
    let last = hidden.index((.., -1.., ..));
    host_rows(&model.logits(&last).unwrap()).unwrap().remove(0)
}

fn worst_difference(left: &[f32], right: &[f32]) -> f32 {
    left.iter()
        .zip(right)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

#[test]
fn a_prefix_restored_from_blocks_and_a_tail_gives_the_cold_logits() {
    let (_dir, loaded) = tiny_llama();
    let model = &loaded.model;
    let mut prefix = ram_only(&loaded);
    // A first turn of 14 tokens: three whole blocks and a tail of two.
    let first: Vec<u32> = (0..14).map(|index| 3 + index * 5).collect();
    let mut cache = model.new_cache();
    last_logits(model, &first, &mut cache);
    prefix.store_sequence(&first, first.len(), &cache);

    // The continuation repeats all of it; the re-rendered one differs at its last token.
    let continued: Vec<u32> = first.iter().copied().chain([90, 91, 92]).collect();
    let mut rerendered = continued.clone();
    rerendered[13] = 77;
    // The continuation only goes on past what was cached; the re-rendering parts from it at 13.
    for (prompt, expected, diverged) in [(&continued, 14, None), (&rerendered, 13, Some(13))] {
        let Restored {
            caches: mut restored,
            cached_tokens: cached,
            diverged_at,
        } = prefix.restore(prompt, || model.new_cache());
        assert_eq!(cached, expected);
        assert_eq!(diverged_at, diverged);
        let warm = last_logits(model, &prompt[cached..], &mut restored);
        let cold = last_logits(model, prompt, &mut model.new_cache());
        let worst = worst_difference(&warm, &cold);
        assert!(
            worst <= TOLERANCE,
            "{expected} restored tokens: logits differ by {worst}"
        );
    }
}

#[test]
fn a_generated_block_the_next_prompt_rerenders_still_reuses_to_the_token() {
    let (_dir, loaded) = tiny_llama();
    let model = &loaded.model;
    let mut prefix = ram_only(&loaded);
    // A 10-token prompt and 6 generated tokens: four whole blocks, the last two mixing prompt
    // and generated tokens.
    let first: Vec<u32> = (0..16).map(|index| 3 + index * 5).collect();
    let mut cache = model.new_cache();
    last_logits(model, &first, &mut cache);
    prefix.store_sequence(&first, 10, &cache);
    // The next turn re-renders generated token 13: the fourth block no longer matches, the
    // tail from the prompt's last whole block (token 8 on) does, to token 13.
    let mut next: Vec<u32> = first.iter().copied().chain([90, 91]).collect();
    next[13] = 77;
    let Restored {
        caches: mut restored,
        cached_tokens: cached,
        ..
    } = prefix.restore(&next, || model.new_cache());
    assert_eq!(cached, 13);
    let warm = last_logits(model, &next[cached..], &mut restored);
    let cold = last_logits(model, &next, &mut model.new_cache());
    assert!(worst_difference(&warm, &cold) <= TOLERANCE);
}

/// The first block file the SSD tier wrote under `disk`: each layer's `(kv_heads, key_dim,
/// value_dim)` from its header, and its payload's length.
fn first_block_file(disk: &std::path::Path) -> (Vec<(u32, u32, u32)>, u64) {
    let block = std::fs::read_dir(disk)
        .unwrap()
        .flatten()
        .flat_map(|model_dir| std::fs::read_dir(model_dir.path()).unwrap().flatten())
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "kvb"))
        .expect("a block file");
    let header = super::disk::inspect(&block).unwrap();
    let shapes = header
        .shape
        .layers
        .iter()
        .map(|layer| (layer.kv_heads, layer.key_dim, layer.value_dim))
        .collect();
    (shapes, header.payload_len)
}

#[test]
fn a_prefix_of_layers_with_their_own_shapes_restores_from_the_ssd_tier() {
    let (_dir, loaded) = tiny_gemma4();
    let model = &loaded.model;
    let disk = tempfile::tempdir().unwrap();
    let first: Vec<u32> = (0..14).map(|index| 3 + index * 5).collect();
    {
        let mut prefix = with_disk(&loaded, Some(disk.path()));
        let mut cache = model.new_cache();
        assert_eq!(cache.len(), 2, "the KV-shared layers hold no cache");
        last_logits(model, &first, &mut cache);
        prefix.store_sequence(&first, first.len(), &cache);
        assert!(prefix.flush(std::time::Duration::from_secs(300)));
    }
    let (shapes, payload_len) = first_block_file(disk.path());
    assert_eq!(shapes, [(1, 16, 16), (1, 32, 32)]);
    assert_eq!(payload_len, 2 * (16 + 32) * BLOCK_TOKENS as u64 * 4 + 1);

    // A new worker: RAM is empty, the three whole blocks come from the SSD.
    let mut prefix = with_disk(&loaded, Some(disk.path()));
    let continued: Vec<u32> = first.iter().copied().chain([90, 91, 92]).collect();
    let Restored {
        caches: mut restored,
        cached_tokens: cached,
        ..
    } = prefix.restore(&continued, || model.new_cache());
    assert_eq!(cached, 12);
    let warm = last_logits(model, &continued[cached..], &mut restored);
    let cold = last_logits(model, &continued, &mut model.new_cache());
    let worst = worst_difference(&warm, &cold);
    assert!(worst <= TOLERANCE, "logits differ by {worst}");
}

/// mlx-lm's tiny DeepSeek V3 (`tests/data/toolchain/deepseek_v3/mlx`): each of its 3 layers
/// caches a 32-wide latent and an 8-wide rotary key per position, which blocks carry at their
/// own widths.
#[test]
fn a_latent_attention_prefix_restores_from_ram_and_from_the_ssd_tier() {
    let (_dir, loaded) = tiny_reference("deepseek_v3/mlx");
    let model = &loaded.model;
    let disk = tempfile::tempdir().unwrap();
    let first: Vec<u32> = (0..14).map(|index| 3 + index * 5).collect();
    let continued: Vec<u32> = first.iter().copied().chain([90, 91, 92]).collect();
    let cold = last_logits(model, &continued, &mut model.new_cache());
    {
        let mut prefix = with_disk(&loaded, Some(disk.path()));
        let mut cache = model.new_cache();
        last_logits(model, &first, &mut cache);
        prefix.store_sequence(&first, first.len(), &cache);
        let Restored {
            caches: mut restored,
            cached_tokens: cached,
            ..
        } = prefix.restore(&continued, || model.new_cache());
        assert_eq!(cached, 14);
        let warm = last_logits(model, &continued[cached..], &mut restored);
        let worst = worst_difference(&warm, &cold);
        assert!(worst <= TOLERANCE, "from RAM: logits differ by {worst}");
        assert!(prefix.flush(std::time::Duration::from_secs(300)));
    }
    let (shapes, payload_len) = first_block_file(disk.path());
    assert_eq!(shapes, [(1, 32, 8), (1, 32, 8), (1, 32, 8)]);
    assert_eq!(payload_len, 3 * (32 + 8) * BLOCK_TOKENS as u64 * 4 + 1);

    // A new worker: RAM is empty, the three whole blocks come from the SSD.
    let mut prefix = with_disk(&loaded, Some(disk.path()));
    let Restored {
        caches: mut restored,
        cached_tokens: cached,
        ..
    } = prefix.restore(&continued, || model.new_cache());
    assert_eq!(cached, 12);
    let warm = last_logits(model, &continued[cached..], &mut restored);
    let worst = worst_difference(&warm, &cold);
    assert!(worst <= TOLERANCE, "from the SSD: logits differ by {worst}");
}

/// Runs `prompt` in chunks of `chunk` tokens, as a sequence prefills, then decodes `generated`
/// one at a time, giving each pass's blocks and snapshots to `prefix` as a sequence does; the
/// sequence's tokens end with the generated ones.
fn run_sequence(
    prefix: &mut PrefixCache,
    model: &Model,
    prompt: &[u32],
    chunk: usize,
    generated: &[u32],
) {
    let mut cache = model.new_cache();
    for layer in &mut cache {
        layer.snapshot_every(BLOCK_TOKENS as i32);
    }
    let mut prefilled = 0;
    for piece in prompt.chunks(chunk) {
        last_logits(model, piece, &mut cache);
        prefilled += piece.len();
        prefix.store(prompt, prefilled, &mut cache);
    }
    let tokens: Vec<u32> = prompt.iter().chain(generated).copied().collect();
    for (index, &token) in generated.iter().enumerate() {
        last_logits(model, &[token], &mut cache);
        prefix.store_decoded(&tokens[..prompt.len() + index + 1], &mut cache);
    }
    prefix.store_sequence(&tokens, prompt.len(), &cache);
}

fn assert_restores_like_cold(
    prefix: &mut PrefixCache,
    model: &Model,
    prompt: &[u32],
    cached: usize,
) {
    let Restored {
        caches: mut restored,
        cached_tokens: restored_tokens,
        ..
    } = prefix.restore(prompt, || model.new_cache());
    assert_eq!(restored_tokens, cached);
    let warm = last_logits(model, &prompt[cached..], &mut restored);
    let cold = last_logits(model, prompt, &mut model.new_cache());
    let worst = worst_difference(&warm, &cold);
    assert!(
        worst <= TOLERANCE,
        "{cached} restored tokens: logits differ by {worst}"
    );
}

#[test]
fn a_recurrent_model_restores_from_the_deepest_boundary_snapshot_in_ram_and_on_ssd() {
    let (_dir, loaded) = tiny_qwen3_5();
    let model = &loaded.model;
    let disk = tempfile::tempdir().unwrap();
    // 14 prompt tokens in chunks of 3 (boundaries 4, 8 and 12 fall inside chunks), then 6
    // generated: boundaries 16 and 20 fall in the decode. Kept: 12 (the prompt's last whole
    // block), 16 (every fourth boundary) and 20 (the sequence's last); 4 and 8 are not.
    let prompt: Vec<u32> = (0..14).map(|index| 3 + index * 5).collect();
    let generated = [7, 11, 13, 17, 19, 23];
    let continued: Vec<u32> = prompt
        .iter()
        .chain(&generated)
        .copied()
        .chain([90, 91])
        .collect();
    let mut diverging = continued.clone();
    diverging[13] = 77;
    let mut early = continued.clone();
    early[9] = 77;
    {
        let mut prefix = with_disk(&loaded, Some(disk.path()));
        run_sequence(&mut prefix, model, &prompt, 3, &generated);
        assert_restores_like_cold(&mut prefix, model, &continued, 20);
        assert_restores_like_cold(&mut prefix, model, &diverging, 12);
        // Blocks 4 and 8 are cached but carry no snapshot: nothing to restore from.
        assert_restores_like_cold(&mut prefix, model, &early, 0);
        assert!(prefix.flush(std::time::Duration::from_secs(300)));
    }
    // A new worker: RAM is empty, the blocks and their snapshots come from the SSD.
    let mut prefix = with_disk(&loaded, Some(disk.path()));
    assert_restores_like_cold(&mut prefix, model, &continued, 20);
    assert_restores_like_cold(&mut prefix, model, &diverging, 12);
    assert_eq!(prefix.counters.snapshot().load_errors, 0);
}

#[test]
fn a_snapshot_recorded_later_is_added_to_a_block_kept_without_one() {
    let (_dir, loaded) = tiny_qwen3_5();
    let model = &loaded.model;
    let mut prefix = ram_only(&loaded);
    let long: Vec<u32> = (0..14).map(|index| 3 + index * 5).collect();
    run_sequence(&mut prefix, model, &long, 5, &[]);
    // A shorter prompt whose last whole block (ending at 8) the first kept without a snapshot.
    let short = &long[..10];
    assert_restores_like_cold(&mut prefix, model, short, 0);
    run_sequence(&mut prefix, model, short, 5, &[]);
    assert_restores_like_cold(&mut prefix, model, short, 8);
}

#[test]
fn a_recurrent_model_resumes_a_conversation_to_the_token_from_its_tails_states() {
    let (_dir, loaded) = tiny_qwen3_5();
    let model = &loaded.model;
    let mut prefix = ram_only(&loaded);
    // 14 prompt tokens and 5 generated: the blocks end at 16, the tail from 12 holds the states
    // at the prompt's end (14) and at the sequence's (19).
    let prompt: Vec<u32> = (0..14).map(|index| 3 + index * 5).collect();
    let generated = [7, 11, 13, 17, 19];
    run_sequence(&mut prefix, model, &prompt, 5, &generated);
    let answered: Vec<u32> = prompt.iter().chain(&generated).copied().collect();
    let with = |history: &[u32]| -> Vec<u32> { history.iter().copied().chain([90, 91]).collect() };
    // The answer resent as generated: everything the sequence computed.
    assert_restores_like_cold(&mut prefix, model, &with(&answered), 19);
    // The answer re-rendered differently: the prompt, to its last token.
    let mut rerendered = answered.clone();
    rerendered[15] = 77;
    assert_restores_like_cold(&mut prefix, model, &with(&rerendered), 14);
    // The prompt resent as a prefix, short of its end: the last boundary snapshot.
    assert_restores_like_cold(&mut prefix, model, &with(&prompt[..13]), 12);
    // The turn after, continuing the second: its own tail, beside the first's.
    let second = with(&rerendered);
    run_sequence(&mut prefix, model, &second, 5, &[5, 6]);
    let third: Vec<u32> = second.iter().copied().chain([5, 6, 40]).collect();
    assert_restores_like_cold(&mut prefix, model, &third, 23);
    assert_restores_like_cold(&mut prefix, model, &with(&answered), 19);
}

#[test]
fn a_snapshot_added_while_the_writer_holds_its_block_reaches_the_ssd() {
    let (_dir, loaded) = tiny_qwen3_5();
    let model = &loaded.model;
    let disk = tempfile::tempdir().unwrap();
    let long: Vec<u32> = (0..14).map(|index| 3 + index * 5).collect();
    let short = &long[..6];
    let continued: Vec<u32> = long.iter().copied().chain([90, 91]).collect();
    {
        let mut prefix = with_disk(&loaded, Some(disk.path()));
        fn tier(prefix: &PrefixCache) -> &super::DiskTier {
            prefix.disk.as_ref().unwrap()
        }
        tier(&prefix).hold_writer();
        run_sequence(&mut prefix, model, &long, 5, &[]);
        // The writer holds the first block, kept without a snapshot, between its temp file and
        // its rename, when the shorter prompt records one at its end.
        let first = super::key::block_keys(&prefix.fingerprint, &long[..4], BLOCK_TOKENS)[0];
        assert_eq!(tier(&prefix).wait_parked(), first);
        run_sequence(&mut prefix, model, short, 5, &[]);
        tier(&prefix).release_writer();
        assert!(prefix.flush(std::time::Duration::from_secs(300)));
    }
    // A new worker: the first block comes from the SSD with its snapshot, and the chain after it
    // is whole.
    let mut prefix = with_disk(&loaded, Some(disk.path()));
    assert_restores_like_cold(&mut prefix, model, short, 4);
    assert_restores_like_cold(&mut prefix, model, &continued, 12);
}

#[test]
fn a_restored_sequence_packed_with_another_gives_its_cold_logits() {
    let (_dir, loaded) = tiny_qwen3_5();
    let model = &loaded.model;
    let mut prefix = ram_only(&loaded);
    let prompt: Vec<u32> = (0..14).map(|index| 3 + index * 5).collect();
    run_sequence(&mut prefix, model, &prompt, 5, &[]);
    let continued: Vec<u32> = prompt.iter().copied().chain([90, 91]).collect();
    // Restored to the prompt's end, off a block boundary, from the tail's states.
    let Restored {
        caches: mut restored,
        cached_tokens: cached,
        ..
    } = prefix.restore(&continued, || model.new_cache());
    assert_eq!(cached, 14);
    // Another sequence in the same pass, recording its own boundary (4) mid-pass.
    let other: Vec<u32> = (0..7).map(|index| 100 - index * 3).collect();
    let mut other_cache = model.new_cache();
    for layer in &mut other_cache {
        layer.snapshot_every(BLOCK_TOKENS as i32);
    }
    let rest = &continued[cached..];
    let hidden = model
        .packed_hidden_states(&mut [
            Segment {
                tokens: rest,
                cache: &mut restored,
                embedded: Vec::new(),
            },
            Segment {
                tokens: &other,
                cache: &mut other_cache,
                embedded: Vec::new(),
            },
        ])
        .unwrap();
    let last = |position: usize| {
        let row = hidden.index((.., position as i32..position as i32 + 1, ..));
        host_rows(&model.logits(&row).unwrap()).unwrap().remove(0)
    };
    let packed = [last(rest.len() - 1), last(rest.len() + other.len() - 1)];
    let cold = [
        last_logits(model, &continued, &mut model.new_cache()),
        last_logits(model, &other, &mut model.new_cache()),
    ];
    for (packed, cold) in packed.iter().zip(&cold) {
        let worst = worst_difference(packed, cold);
        assert!(worst <= TOLERANCE, "logits differ by {worst}");
    }
    // The other sequence's snapshot is its own state at 4, as if it had run alone.
    let mut alone = model.new_cache();
    for layer in &mut alone {
        layer.snapshot_every(BLOCK_TOKENS as i32);
    }
    last_logits(model, &other, &mut alone);
    let host = |array: &mlx_rs::Array| {
        let array = array.as_dtype(mlx_rs::Dtype::Float32).unwrap();
        array.eval().unwrap();
        array.as_slice::<f32>().to_vec()
    };
    let packed_state = super::blocks::snapshot(&other_cache, 4).unwrap().unwrap();
    let alone_state = super::blocks::snapshot(&alone, 4).unwrap().unwrap();
    for (packed, alone) in packed_state.iter().zip(&alone_state) {
        for (packed, alone) in packed.slots().into_iter().zip(alone.slots()) {
            let worst = worst_difference(&host(packed.unwrap()), &host(alone.unwrap()));
            assert!(worst <= TOLERANCE, "snapshots differ by {worst}");
        }
    }
}
