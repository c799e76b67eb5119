//! The written-out soft-capped attention against MLX's fused one, and the mask of runs that
//! see each other both ways.

use mlx_rs::random;

use super::*;

const HEADS: i32 = 4;
const KV_HEADS: i32 = 2;
const HEAD_DIM: i32 = 8;

/// `[1, heads, positions, HEAD_DIM]`, scaled so that scores reach a few units.
fn draw(seed: u64, heads: i32, positions: i32) -> Array {
    let key = random::key(seed).unwrap();
    random::uniform::<_, f32>(-2.0, 2.0, &[1, heads, positions, HEAD_DIM], Some(&key)).unwrap()
}

fn max_difference(a: &Array, b: &Array) -> f32 {
    ops::abs(ops::subtract(a, b).unwrap())
        .unwrap()
        .max(None)
        .unwrap()
        .item_exact::<f32>()
}

/// New positions over a cache of 10 keys (the new ones last), with and without a window.
fn cases() -> Vec<(i32, Option<Window>)> {
    [1, 4, 10]
        .into_iter()
        .flat_map(|positions| [None, Some(Window::Sliding(3))].map(|window| (positions, window)))
        .collect()
}

#[test]
fn a_cap_no_score_reaches_leaves_attention_as_mlx_computes_it() {
    let (keys, values) = (draw(1, KV_HEADS, 10), draw(2, KV_HEADS, 10));
    for (positions, window) in cases() {
        let queries = draw(3, HEADS, positions);
        let seen = Seen {
            window,
            both_ways: &[],
        };
        let fused = attention(&queries, &keys, &values, 0.5, seen, None).unwrap();
        let capped = softcapped_attention(&queries, &keys, &values, 0.5, 1e6, seen).unwrap();
        let difference = max_difference(&fused, &capped);
        assert!(
            difference < 1e-5,
            "{positions} positions, {window:?}: {difference}"
        );
    }
}

#[test]
fn a_low_cap_changes_the_attention() {
    let (keys, values) = (draw(1, KV_HEADS, 10), draw(2, KV_HEADS, 10));
    let queries = draw(3, HEADS, 4);
    let seen = Seen::default();
    let fused = attention(&queries, &keys, &values, 0.5, seen, None).unwrap();
    let capped = softcapped_attention(&queries, &keys, &values, 0.5, 1.0, seen).unwrap();
    assert!(max_difference(&fused, &capped) > 1e-2);
}

/// The mask written out as transformers' Gemma 3 composes it, position by position.
fn expected_visible(query: i32, key: i32, window: Option<i32>, run: (i32, i32)) -> bool {
    let in_run = |position: i32| (run.0..run.1).contains(&position);
    let past_or_run = key <= query || (in_run(query) && in_run(key));
    past_or_run && window.is_none_or(|window| key > query - window)
}

#[test]
fn a_run_seen_both_ways_opens_the_future_within_it_and_nothing_else() {
    let (cached, new_positions, run) = (10, 6, (5, 9));
    for window in [None, Some(3)] {
        let seen = Seen {
            window: window.map(Window::Sliding),
            both_ways: &[run],
        };
        let visible = visible_keys(new_positions, 0, cached, seen).unwrap();
        let visible: Vec<bool> = visible.as_slice::<bool>().to_vec();
        for index in 0..new_positions {
            let query = cached - new_positions + index;
            for key in 0..cached {
                assert_eq!(
                    visible[(index * cached + key) as usize],
                    expected_visible(query, key, window, run),
                    "query {query}, key {key}, window {window:?}"
                );
            }
        }
    }
}
