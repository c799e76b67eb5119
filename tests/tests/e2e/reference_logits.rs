//! The engine's forward pass agrees with mlx-lm, the reference implementation, on the fixture
//! models: logits within a tolerance, and the greedy token wherever the reference's top two are
//! far enough apart for the tolerance not to matter. Both the one-pass forward (prefill) and the
//! token-by-token path through the KV cache are checked.
//!
//! The reference data comes from `cargo xtask reference` (scripts/reference/).

use std::path::Path;

use clap::ValueEnum;
use corral_fixture::{Arch, Bits, Dtype, FixtureOptions, Format, Size};
use corral_worker::model::Model;
use mlx_rs::Dtype as MlxDtype;
use serde_json::Value;

const REFERENCE: &str = include_str!("../../data/reference_logits.json");
const FIXTURES: &str = include_str!("../../../scripts/reference/fixtures.txt");

/// Logit tolerance (absolute). Logits here reach about 20 in magnitude; f32 differs from the
/// reference only by summation order, bf16 by the rounding of every intermediate activation.
fn tolerance(dtype: Dtype) -> f32 {
    match dtype {
        Dtype::F32 => 2e-3,
        Dtype::F16 | Dtype::Bf16 => 0.15,
    }
}

/// Tokens fed one by one after this many prefilled ones in the cached path.
const PREFILLED: usize = 8;

fn fixture_options(name: &str) -> FixtureOptions {
    let line = FIXTURES
        .lines()
        .find(|line| line.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("{name} is not in fixtures.txt"));
    let mut options = FixtureOptions {
        size: Size::Tiny,
        arch: Arch::Llama,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    let words: Vec<&str> = line.split_whitespace().skip(1).collect();
    for pair in words.chunks(2) {
        let value = pair[1];
        match pair[0] {
            "--size" => options.size = Size::from_str(value, true).unwrap(),
            "--arch" => options.arch = Arch::from_str(value, true).unwrap(),
            "--dtype" => options.dtype = Dtype::from_str(value, true).unwrap(),
            "--quantize" => options.quantize = Some(Bits::from_str(value, true).unwrap()),
            other => panic!("unknown fixture argument {other}"),
        }
    }
    options
}

/// Logits `[.., vocab]` as one vector per row.
pub(crate) fn host_rows(logits: &mlx_rs::Array) -> Vec<Vec<f32>> {
    let logits = logits.as_dtype(MlxDtype::Float32).unwrap();
    logits.eval().unwrap();
    let vocab = *logits.shape().last().unwrap() as usize;
    logits
        .as_slice::<f32>()
        .chunks(vocab)
        .map(<[f32]>::to_vec)
        .collect()
}

/// Logits at every position, in one forward pass.
fn prefill_logits(model: &Model, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache();
    let hidden = model.hidden_states(tokens, &mut cache).unwrap();
    host_rows(&model.logits(&hidden).unwrap())
}

/// Logits at every position, prefilling a few tokens and then decoding one at a time.
fn cached_logits(model: &Model, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache();
    let hidden = model
        .hidden_states(&tokens[..PREFILLED], &mut cache)
        .unwrap();
    let mut rows = host_rows(&model.logits(&hidden).unwrap());
    for &token in &tokens[PREFILLED..] {
        let hidden = model.hidden_states(&[token], &mut cache).unwrap();
        rows.extend(host_rows(&model.logits(&hidden).unwrap()));
    }
    rows
}

fn argmax(row: &[f32]) -> usize {
    (0..row.len())
        .max_by(|&a, &b| row[a].total_cmp(&row[b]))
        .unwrap()
}

fn assert_agrees(name: &str, path: &str, rows: &[Vec<f32>], reference: &Value, tol: f32) {
    for expected in reference["rows"].as_array().unwrap() {
        let position = expected["position"].as_u64().unwrap() as usize;
        let gap = expected["top_two_gap"].as_f64().unwrap() as f32;
        let want: Vec<f32> = expected["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|value| value.as_f64().unwrap() as f32)
            .collect();
        let got = &rows[position];
        assert_eq!(got.len(), want.len(), "{name} {path}: vocabulary size");
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst <= tol,
            "{name} {path}: position {position} differs from mlx-lm by {worst} (tolerance {tol})"
        );
        if gap > 4.0 * tol {
            assert_eq!(
                argmax(got),
                argmax(&want),
                "{name} {path}: greedy token at position {position} (reference gap {gap})"
            );
        }
    }
}

fn check(name: &str) {
    let options = fixture_options(name);
    let reference_doc: Value = serde_json::from_str(REFERENCE).unwrap();
    let reference = &reference_doc["models"][name];
    let tokens: Vec<u32> = reference["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|token| token.as_u64().unwrap() as u32)
        .collect();
    let dir = tempfile::tempdir().unwrap();
    corral_fixture::generate(&options, dir.path()).unwrap();
    let model = Model::load(Path::new(dir.path())).unwrap();
    let tol = tolerance(options.dtype);
    assert_agrees(
        name,
        "prefill",
        &prefill_logits(&model, &tokens),
        reference,
        tol,
    );
    assert_agrees(
        name,
        "decode",
        &cached_logits(&model, &tokens),
        reference,
        tol,
    );
}

#[test]
fn tiny_llama_f32_matches_mlx_lm() {
    check("tiny-llama-f32");
}

#[test]
fn tiny_qwen2_bf16_matches_mlx_lm() {
    check("tiny-qwen2-bf16");
}

#[test]
fn tiny_qwen3_f32_matches_mlx_lm() {
    check("tiny-qwen3-f32");
}

#[test]
fn tiny_llama_4bit_matches_mlx_lm() {
    check("tiny-llama-q4");
}

#[test]
fn tiny_qwen3_8bit_matches_mlx_lm() {
    check("tiny-qwen3-q8");
}
