//! The Hugging Face layout's `kv_b_proj` split as mlx-lm's `sanitize` splits it.

use std::collections::HashMap;
use std::path::Path;

use mlx_rs::random;

use super::*;

const HEADS: i32 = 2;
const NOPE: i32 = 64;
const V: i32 = 32;
const RANK: i32 = 64;
const PREFIX: &str = "model.layers.0.self_attn";

fn spec() -> LatentSpec {
    LatentSpec {
        heads: HEADS,
        hidden: 64,
        q_lora_rank: None,
        kv_lora_rank: RANK,
        qk_nope_head_dim: NOPE,
        qk_rope_head_dim: 16,
        v_head_dim: V,
        bias: false,
        lora_eps: 1e-6,
        scale: 1.0,
        rope: Rope::new(16, 10_000.0, true, None).unwrap(),
    }
}

/// `kv_b_proj` as the Hugging Face layout has it, `[heads · (nope + v), rank]`.
fn kv_b_proj() -> Array {
    let key = random::key(7).unwrap();
    random::uniform::<_, f32>(-1.0, 1.0, &[HEADS * (NOPE + V), RANK], Some(&key)).unwrap()
}

fn split(tensors: HashMap<String, Array>) -> Weights {
    let mut weights = Weights::from_loaded(tensors, Path::new("test"), HashMap::new());
    split_kv_b_proj(&mut weights, PREFIX, &spec()).unwrap();
    weights
}

fn max_difference(a: &Array, b: &Array) -> f32 {
    ops::abs(ops::subtract(a, b).unwrap())
        .unwrap()
        .max(None)
        .unwrap()
        .item_exact::<f32>()
}

#[test]
fn kv_b_proj_splits_into_each_heads_key_rows_transposed_and_value_rows() {
    let dense = kv_b_proj();
    let name = format!("{PREFIX}.kv_b_proj.weight");
    let mut weights = split(HashMap::from([(name, dense.clone())]));
    let embed_q = weights
        .take(&format!("{PREFIX}.embed_q.weight"), &[HEADS, RANK, NOPE])
        .unwrap();
    let unembed_out = weights
        .take(&format!("{PREFIX}.unembed_out.weight"), &[HEADS, V, RANK])
        .unwrap();
    assert!(weights.leftover_names().is_empty());
    let rows = NOPE + V;
    for head in 0..HEADS {
        let keys = dense.index((head * rows..head * rows + NOPE, ..));
        let values = dense.index((head * rows + NOPE..(head + 1) * rows, ..));
        assert_eq!(max_difference(&embed_q.index(head), &keys.t()), 0.0);
        assert_eq!(max_difference(&unembed_out.index(head), &values), 0.0);
    }
}

#[test]
fn a_quantized_kv_b_proj_is_split_and_quantized_again_with_its_format() {
    let (packed, scales, biases) = quantize(kv_b_proj(), 64, 4).unwrap();
    let original = dequantize(&packed, &scales, &biases, 64, 4).unwrap();
    let source = format!("{PREFIX}.kv_b_proj");
    let mut weights = split(HashMap::from([
        (format!("{source}.weight"), packed),
        (format!("{source}.scales"), scales),
        (format!("{source}.biases"), biases),
    ]));
    let mut dequantized = |name: &str| {
        let mut take = |kind: &str| {
            weights
                .take_any(&format!("{PREFIX}.{name}.{kind}"))
                .unwrap()
                .0
        };
        let (weight, scales, biases) = (take("weight"), take("scales"), take("biases"));
        dequantize(&weight, &scales, &biases, 64, 4).unwrap()
    };
    let [keys, values] = {
        let per_head = original.reshape(&[HEADS, NOPE + V, RANK]).unwrap();
        [
            per_head.index((.., ..NOPE, ..)).swap_axes(-1, -2).unwrap(),
            per_head.index((.., NOPE.., ..)),
        ]
    };
    // The values keep their groups along the latent, so their 4-bit values come back as
    // they were; the keys are regrouped along their other axis, within a quantization step.
    assert!(max_difference(&dequantized("unembed_out"), &values) < 1e-5);
    assert!(max_difference(&dequantized("embed_q"), &keys) < 0.15);
}
