use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::random;

use super::*;

/// Normal values from a fixed key: MLX's default key is seeded from the clock.
fn seeded_normal(shape: &[i32], seed: u64) -> Array {
    let key = random::key(seed).unwrap();
    random::normal::<f32>(shape, None, None, Some(&key)).unwrap()
}

fn max_relative_difference(got: &Array, expected: &Array) -> f32 {
    let difference = ops::abs(ops::subtract(got, expected).unwrap()).unwrap();
    let relative = ops::divide(
        &difference,
        ops::maximum(ops::abs(expected).unwrap(), Array::from_f32(1e-30)).unwrap(),
    )
    .unwrap();
    relative.max(None).unwrap().item_exact::<f32>()
}

fn max_difference(got: &Array, expected: &Array) -> f32 {
    ops::abs(ops::subtract(got, expected).unwrap())
        .unwrap()
        .max(None)
        .unwrap()
        .item_exact::<f32>()
}

#[test]
fn polynomial_exp_is_exp_to_a_few_ulps_across_the_range() {
    // Against f64: MLX's own f32 `exp` reduces by x·log2(e) and is off by up to 4e-6 here.
    let steps: Vec<f32> = (0..=100_000)
        .map(|i| -87.0 + 174.0 * i as f32 / 1e5)
        .collect();
    let x = Array::from_slice(&steps, &[100_001]);
    let exact: Vec<f32> = steps.iter().map(|&x| f64::from(x).exp() as f32).collect();
    let exact = Array::from_slice(&exact, &[100_001]);
    let error = max_relative_difference(&polynomial_exp(&x).unwrap(), &exact);
    assert!(error < 3e-7, "relative error {error}");
}

#[test]
fn the_host_polynomial_exp_is_the_mlx_one() {
    let mut steps: Vec<f32> = (0..=100_000).map(|i| -87.0 * i as f32 / 1e5).collect();
    let expected = polynomial_exp(&Array::from_slice(&steps, &[steps.len() as i32])).unwrap();
    for step in &mut steps {
        *step = crate::fast_exp::exp_nonpositive(*step);
    }
    let error =
        max_relative_difference(&Array::from_slice(&steps, &[steps.len() as i32]), &expected);
    assert!(error < 2.5e-7, "relative difference {error}");
}

#[test]
fn polynomial_exp_stays_finite_and_ordered_outside_the_range() {
    let x = Array::from_slice(&[f32::NEG_INFINITY, -1000.0, 1000.0], &[3]);
    let values: Vec<f32> = polynomial_exp(&x).unwrap().as_slice().to_vec();
    assert!(values[0] < 1e-37 && values[1] < 1e-37, "{values:?}");
    assert!(values[2] > 1e37 && values[2].is_finite(), "{values:?}");
}

#[test]
fn silu_matches_x_times_sigmoid() {
    for (rows, seed) in [(1, 1), (3, 2), (64, 3)] {
        let x = ops::multiply(seeded_normal(&[rows, 300], seed), Array::from_f32(20.0)).unwrap();
        let expected = ops::multiply(&x, ops::sigmoid(&x).unwrap()).unwrap();
        let difference = max_difference(&silu(&x).unwrap(), &expected);
        assert!(
            difference < 1e-5,
            "{rows} rows: max difference {difference}"
        );
    }
}

#[test]
fn gelu_matches_the_exact_erf_gelu() {
    let x = ops::multiply(seeded_normal(&[64, 300], 4), Array::from_f32(4.0)).unwrap();
    let erf =
        ops::erf(ops::multiply(&x, Array::from_f32(std::f32::consts::FRAC_1_SQRT_2)).unwrap())
            .unwrap();
    let expected = ops::multiply(
        ops::multiply(&x, Array::from_f32(0.5)).unwrap(),
        ops::add(&erf, Array::from_f32(1.0)).unwrap(),
    )
    .unwrap();
    let difference = max_difference(&gelu(&x).unwrap(), &expected);
    assert!(difference < 2e-6, "max difference {difference}");
}

#[test]
fn padded_attention_matches_mlx_with_the_same_key_mask() {
    let (rows, heads, length, head_dim) = (3, 4, 40, 16);
    let shape = [rows, heads, length, head_dim];
    let queries = seeded_normal(&shape, 5);
    let keys = seeded_normal(&shape, 6);
    let values = seeded_normal(&shape, 7);
    let real: Vec<bool> = [40, 7, 23]
        .iter()
        .flat_map(|&real| (0..length).map(move |position| position < real))
        .collect();
    let key_mask = Array::from_slice(&real, &[rows, 1, 1, length]);
    let expected = fast::scaled_dot_product_attention(
        &queries,
        &keys,
        &values,
        0.25,
        ScaledDotProductAttentionMask::Array(&key_mask),
        None,
    )
    .unwrap();
    let got = padded_attention(&queries, &keys, &values, 0.25, &key_mask).unwrap();
    let difference = max_difference(&got, &expected);
    assert!(difference < 1e-5, "max difference {difference}");
}

#[test]
fn attention_matches_mlx_for_prefill_chunks_and_single_positions() {
    for (new_positions, cached) in [(1, 1), (1, 37), (1, 600), (5, 5), (16, 40), (33, 33)] {
        let seed = (new_positions * 1000 + cached) as u64;
        let queries = seeded_normal(&[1, 8, new_positions, 16], seed);
        let keys = seeded_normal(&[1, 2, cached, 16], seed + 1);
        let values = seeded_normal(&[1, 2, cached, 16], seed + 2);
        let mask = (new_positions > 1).then_some(ScaledDotProductAttentionMask::Causal);
        let expected =
            fast::scaled_dot_product_attention(&queries, &keys, &values, 0.25, mask, None).unwrap();
        let causal: Vec<bool> = (0..new_positions)
            .flat_map(|i| (0..cached).map(move |j| j <= cached - new_positions + i))
            .collect();
        let causal = Array::from_slice(&causal, &[new_positions, cached]);
        let visible = (new_positions > 1).then_some(&causal);
        let got = attention(&queries, &keys, &values, 0.25, visible).unwrap();
        assert_eq!(got.shape(), expected.shape());
        let difference = max_difference(&got, &expected);
        assert!(
            difference < 1e-5,
            "{new_positions} new of {cached}: max difference {difference}"
        );
    }
}
