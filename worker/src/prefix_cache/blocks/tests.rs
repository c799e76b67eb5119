use mlx_rs::random;

use super::*;

/// Layers of two widths, as Gemma 4's sliding and full-attention layers are, a latent one
/// whose values are narrower than its keys, and one recurrent layer.
fn shape() -> BlockShape {
    BlockShape {
        block_tokens: 4,
        dtype: 0,
        recurrent_layers: 1,
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

fn seeded(dims: &[i32], seed: u64, dtype: Dtype) -> Array {
    let key = random::key(seed).unwrap();
    random::normal::<f32>(dims, None, None, Some(&key))
        .unwrap()
        .as_dtype(dtype)
        .unwrap()
}

fn layers(dtype: Dtype) -> Vec<(Array, Array)> {
    (0..)
        .zip(shape().layers)
        .map(|(index, layer)| {
            let dims = |dim: u32| [1, layer.kv_heads as i32, 4, dim as i32];
            (
                seeded(&dims(layer.key_dim), 2 * index, dtype),
                seeded(&dims(layer.value_dim), 2 * index + 1, dtype),
            )
        })
        .collect()
}

/// A gated DeltaNet layer's state: the convolution's inputs in the model's dtype, the
/// memory in f32.
fn snapshot(dtype: Dtype) -> Vec<RecurrentState> {
    vec![RecurrentState {
        conv: Some(seeded(&[1, 3, 12], 10, dtype)),
        delta: Some(seeded(&[1, 2, 4, 4], 11, Dtype::Float32)),
    }]
}

fn assert_same(left: &Array, right: &Array) {
    assert_eq!(left.dtype(), right.dtype());
    assert_eq!(left.shape(), right.shape());
    assert!(left.eq_values(right).unwrap());
}

#[test]
fn every_cache_dtype_round_trips_exactly_at_its_own_width() {
    for (dtype, width) in [
        (Dtype::Float16, 2),
        (Dtype::Bfloat16, 2),
        (Dtype::Float32, 4),
    ] {
        let original = layers(dtype);
        let payload = to_payload(&original, None, dtype).unwrap();
        assert_eq!(
            payload.len(),
            (2 * (2 * 8 + 16) + 12 + 4) * 4 * width + 1,
            "{dtype:?}"
        );
        let (restored, none) = from_payload(&payload, &shape(), dtype).unwrap().unwrap();
        assert!(none.is_none());
        for ((keys, values), (restored_keys, restored_values)) in original.iter().zip(&restored) {
            assert_eq!(restored_keys.dtype(), dtype);
            assert_same(keys, restored_keys);
            assert_same(values, restored_values);
        }
        let states = snapshot(dtype);
        let payload = to_payload(&original, Some(&states), dtype).unwrap();
        let (_, restored) = from_payload(&payload, &shape(), dtype).unwrap().unwrap();
        let restored = restored.expect("a snapshot");
        assert_eq!(snapshot_bytes(&restored), snapshot_bytes(&states));
        for (state, restored) in states.iter().zip(&restored) {
            for (slot, restored_slot) in state.slots().into_iter().zip(restored.slots()) {
                assert_same(slot.unwrap(), restored_slot.unwrap());
            }
        }
    }
}

#[test]
fn a_payload_of_another_width_or_a_cut_snapshot_is_refused() {
    let payload = to_payload(&layers(Dtype::Float32), None, Dtype::Float32).unwrap();
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
    let states = snapshot(Dtype::Float32);
    let payload = to_payload(&layers(Dtype::Float32), Some(&states), Dtype::Float32).unwrap();
    for cut in [1, 5, 100] {
        assert!(
            from_payload(&payload[..payload.len() - cut], &shape(), Dtype::Float32)
                .unwrap()
                .is_none(),
            "{cut} bytes short"
        );
    }
    // A model with two recurrent layers reads one layer's snapshot as cut short.
    let two = BlockShape {
        recurrent_layers: 2,
        ..shape()
    };
    assert!(
        from_payload(&payload, &two, Dtype::Float32)
            .unwrap()
            .is_none()
    );
}
