//! A restored prefix (whole blocks, then part of a tail) continues exactly as a cold prefill of
//! the same prompt: the logits of the prompt's last position agree.

use std::sync::Arc;

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use mlx_rs::ops::indexing::IndexOp;

use super::{PrefixCache, PrefixCacheOptions, PrefixCounters};
use crate::loaded::LoadedModel;
use crate::model::Model;
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

fn ram_only(loaded: &LoadedModel) -> PrefixCache {
    let options = PrefixCacheOptions {
        block_tokens: BLOCK_TOKENS,
        ram_bytes: 64 << 20,
        disk_root: None,
        disk_bytes: 0,
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
    for (prompt, expected) in [(&continued, 14), (&rerendered, 13)] {
        let (mut restored, cached) = prefix.restore(prompt, || model.new_cache());
        assert_eq!(cached, expected);
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
    let (mut restored, cached) = prefix.restore(&next, || model.new_cache());
    assert_eq!(cached, 13);
    let warm = last_logits(model, &next[cached..], &mut restored);
    let cold = last_logits(model, &next, &mut model.new_cache());
    assert!(worst_difference(&warm, &cold) <= TOLERANCE);
}
