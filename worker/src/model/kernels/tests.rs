//! The written-out soft-capped attention against MLX's fused one.

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
        let fused = attention(&queries, &keys, &values, 0.5, window, None).unwrap();
        let capped = softcapped_attention(&queries, &keys, &values, 0.5, 1e6, window).unwrap();
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
    let fused = attention(&queries, &keys, &values, 0.5, None, None).unwrap();
    let capped = softcapped_attention(&queries, &keys, &values, 0.5, 1.0, None).unwrap();
    assert!(max_difference(&fused, &capped) > 1e-2);
}
