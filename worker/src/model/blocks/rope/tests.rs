//! Longrope's two factor sets, each position rotated by its own whatever the call.

use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::random;

use super::*;

/// Positions before this one rotate with the short factors.
const ORIGINAL: i32 = 4;
const POSITIONS: i32 = 8;

fn longrope(short_factor: Option<Vec<f32>>) -> Rope {
    let scaling = RopeScaling::LongRope {
        long_factor: vec![1.0, 2.0, 4.0, 8.0],
        short_factor,
        original_max_position_embeddings: Some(f64::from(ORIGINAL)),
        max_position_embeddings: Some(64.0),
    };
    Rope::new(8, 10_000.0, false, Some(scaling)).unwrap()
}

/// `[1, heads, POSITIONS, 8]`.
fn heads() -> Array {
    let key = random::key(3).unwrap();
    random::uniform::<_, f32>(-1.0, 1.0, &[1, 2, POSITIONS, 8], Some(&key)).unwrap()
}

fn positions(x: &Array, from: i32, to: i32) -> Array {
    x.index((.., .., from..to, ..))
}

fn max_difference(a: &Array, b: &Array) -> f32 {
    ops::abs(ops::subtract(a, b).unwrap())
        .unwrap()
        .max(None)
        .unwrap()
        .item_exact::<f32>()
}

#[test]
fn a_position_rotates_the_same_in_any_chunk_or_decode_row() {
    let rope = longrope(Some(vec![1.0, 1.5, 2.0, 3.0]));
    let x = heads();
    let whole = rope.apply(&x, 0).unwrap();
    // A chunk that straddles the original context, and each position alone.
    let chunk = rope.apply(&positions(&x, 2, 6), 2).unwrap();
    assert!(max_difference(&chunk, &positions(&whole, 2, 6)) < 1e-6);
    for position in 0..POSITIONS {
        let one = positions(&x, position, position + 1);
        let want = positions(&whole, position, position + 1);
        let alone = rope.apply(&one, position).unwrap();
        let row = rope
            .apply_rows(&one, &Array::from_slice(&[position], &[1]))
            .unwrap();
        assert!(max_difference(&alone, &want) < 1e-6, "position {position}");
        assert!(max_difference(&row, &want) < 1e-6, "row at {position}");
    }
}

#[test]
fn the_short_factors_rotate_only_the_positions_before_the_original_context() {
    let x = heads();
    let both = longrope(Some(vec![1.0, 1.5, 2.0, 3.0]))
        .apply(&x, 0)
        .unwrap();
    let long = longrope(None).apply(&x, 0).unwrap();
    let before = max_difference(
        &positions(&both, 1, ORIGINAL),
        &positions(&long, 1, ORIGINAL),
    );
    assert!(before > 1e-2, "short factors unused: {before}");
    let after = max_difference(
        &positions(&both, ORIGINAL, POSITIONS),
        &positions(&long, ORIGINAL, POSITIONS),
    );
    assert!(after < 1e-6, "long factors changed: {after}");
}
