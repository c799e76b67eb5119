use mlx_rs::Array;
use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::IndexOp;

use super::*;
use crate::model::spread_values as values;

#[test]
fn matches_mlx_attention_over_partly_filled_caches() {
    let shape = Heads {
        heads: 4,
        kv_heads: 2,
        head_dim: 12,
        scale: 12f32.powf(-0.5),
        window: None,
    };
    let (capacity, lengths) = (40, [1usize, 17, 40]);
    let kv = shape.kv_heads * capacity * shape.head_dim;
    let buffers: Vec<(Vec<f32>, Vec<f32>)> = (0..lengths.len() as u32)
        .map(|row| (values(kv, row * 2 + 11), values(kv, row * 2 + 12)))
        .collect();
    let width = shape.heads * shape.head_dim;
    let queries = values(lengths.len() * width, 5);
    let caches: Vec<CachedHeads<'_>> = buffers
        .iter()
        .zip(lengths)
        .map(|((keys, values), length)| CachedHeads {
            keys,
            values,
            capacity,
            length,
        })
        .collect();
    let host = attend_one_position(&queries, &caches, shape);
    let dims = |length: usize| {
        [
            1,
            shape.kv_heads as i32,
            length as i32,
            shape.head_dim as i32,
        ]
    };
    for (row, ((keys, values), length)) in buffers.iter().zip(lengths).enumerate() {
        let filled = |buffer: &Vec<f32>| {
            Array::from_slice(buffer, &dims(capacity)).index((.., .., ..length as i32, ..))
        };
        let query = Array::from_slice(
            &queries[row * width..(row + 1) * width],
            &[1, shape.heads as i32, 1, shape.head_dim as i32],
        );
        let expected = fast::scaled_dot_product_attention(
            &query,
            filled(keys),
            filled(values),
            shape.scale,
            None::<ScaledDotProductAttentionMask<'_>>,
            None,
        )
        .unwrap();
        for (index, (host, mlx)) in host[row * width..(row + 1) * width]
            .iter()
            .zip(expected.as_slice::<f32>())
            .enumerate()
        {
            assert!(
                (host - mlx).abs() < 1e-5,
                "row {row}, element {index}: {host} vs {mlx}"
            );
        }
    }
}

#[test]
fn a_chunk_matches_mlx_causal_attention_after_earlier_positions() {
    chunk_matches_mlx(None, 9, 5);
}

#[test]
fn a_long_chunk_across_key_tiles_and_query_blocks_matches_mlx() {
    chunk_matches_mlx(None, 300, 2 * QUERY_BLOCK + 3);
    chunk_matches_mlx(Some(Window::Sliding(100)), 300, 2 * QUERY_BLOCK + 3);
}

#[test]
fn a_chunk_in_a_sliding_window_matches_mlx_with_the_window_mask() {
    chunk_matches_mlx(Some(Window::Sliding(4)), 9, 5);
}

#[test]
fn a_chunk_across_attention_chunks_matches_mlx_with_the_chunk_mask() {
    chunk_matches_mlx(Some(Window::Chunk(4)), 9, 5);
}

/// A chunk of `positions` after `before` cached positions, in a buffer with room to spare.
fn chunk_matches_mlx(window: Option<Window>, before: usize, positions: usize) {
    let shape = Heads {
        heads: 6,
        kv_heads: 2,
        head_dim: 40,
        scale: 40f32.powf(-0.5),
        window,
    };
    let capacity = before + positions + 10;
    let kv = shape.kv_heads * capacity * shape.head_dim;
    let (cached_keys, cached_values) = (values(kv, 21), values(kv, 22));
    let queries = values(shape.heads * positions * shape.head_dim, 23);
    let cache = CachedHeads {
        keys: &cached_keys,
        values: &cached_values,
        capacity,
        length: before + positions,
    };
    let host = attend_causal_chunk(&queries, &cache, shape);

    let length = before + positions;
    let filled = |buffer: &Vec<f32>| {
        let dims = [
            1,
            shape.kv_heads as i32,
            capacity as i32,
            shape.head_dim as i32,
        ];
        Array::from_slice(buffer, &dims).index((.., .., ..length as i32, ..))
    };
    let dims = [
        1,
        shape.heads as i32,
        positions as i32,
        shape.head_dim as i32,
    ];
    // The chunk's position i is at before + i; it sees key j when j <= before + i and, with a
    // sliding window of n, j > before + i - n, or with chunks of n, j / n == (before + i) / n.
    let visible: Vec<bool> = (0..positions)
        .flat_map(|i| {
            (0..length).map(move |j| {
                let position = before + i;
                j <= position
                    && match window {
                        None => true,
                        Some(Window::Sliding(n)) => j + n as usize > position,
                        Some(Window::Chunk(n)) => j / n as usize == position / n as usize,
                    }
            })
        })
        .collect();
    let visible = Array::from_slice(&visible, &[positions as i32, length as i32]);
    let expected = fast::scaled_dot_product_attention(
        Array::from_slice(&queries, &dims),
        filled(&cached_keys),
        filled(&cached_values),
        shape.scale,
        ScaledDotProductAttentionMask::Array(&visible),
        None,
    )
    .unwrap();
    for (index, (host, mlx)) in host.iter().zip(expected.as_slice::<f32>()).enumerate() {
        assert!(
            (host - mlx).abs() < 1e-5,
            "element {index}: {host} vs {mlx}"
        );
    }
}
