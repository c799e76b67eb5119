//! The GGUF path agrees with the safetensors path on the same fixture: `corral fixture --gguf`
//! writes the weights of the f32 fixture as llama.cpp would (names, reversed dims, llama's q/k
//! permutation, block quantization), and the worker's GGUF loader must undo all of it. Logits over
//! the same tokens are compared with the f32 safetensors fixture, within a tolerance set by what
//! each tensor type rounds; the tokenizer rebuilt from the GGUF's metadata must encode and decode
//! exactly as the fixture's `tokenizer.json`, and its chat template render the same prompt.

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, GgufType, Size};
use corral_worker::gguf::GgufModel;
use corral_worker::loaded::LoadedModel;
use corral_worker::model::Model;
use mlx_rs::Dtype as MlxDtype;
use serde_json::json;

const TOKENS: [u32; 24] = [
    7, 139, 273, 409, 547, 670, 795, 939, 68, 199, 332, 450, 587, 726, 850, 976, 104, 234, 366,
    500, 636, 774, 897, 22,
];

fn options(arch: Arch, format: Format) -> FixtureOptions {
    FixtureOptions {
        size: Size::Tiny,
        arch,
        dtype: Dtype::F32,
        quantize: None,
        format,
    }
}

fn logits(model: &Model) -> Vec<f32> {
    let mut cache = model.new_cache();
    let hidden = model.hidden_states(&TOKENS, &mut cache).unwrap();
    let logits = model
        .logits(&hidden)
        .unwrap()
        .as_dtype(MlxDtype::Float32)
        .unwrap();
    logits.eval().unwrap();
    logits.as_slice::<f32>().to_vec()
}

/// How far the GGUF fixture's logits are from the f32 safetensors fixture's: the largest
/// absolute difference, and the correlation over all positions and the whole vocabulary.
fn compare(arch: Arch, gguf_type: GgufType) -> (f32, f32) {
    let dir = tempfile::tempdir().unwrap();
    let reference_dir = dir.path().join("safetensors");
    corral_fixture::generate(&options(arch, Format::Safetensors), &reference_dir).unwrap();
    let gguf = dir.path().join("model.gguf");
    corral_fixture::generate(&options(arch, Format::Gguf(gguf_type)), &gguf).unwrap();
    let expected = logits(&Model::load(&reference_dir).unwrap());
    let found = logits(&GgufModel::load(&gguf).unwrap().model);
    assert_eq!(expected.len(), found.len());
    let difference = expected
        .iter()
        .zip(&found)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    (difference, correlation(&expected, &found))
}

fn correlation(a: &[f32], b: &[f32]) -> f32 {
    let mean = |v: &[f32]| v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
    let (mean_a, mean_b) = (mean(a), mean(b));
    let (mut covariance, mut var_a, mut var_b) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (f64::from(x) - mean_a, f64::from(y) - mean_b);
        covariance += dx * dy;
        var_a += dx * dx;
        var_b += dy * dy;
    }
    (covariance / (var_a * var_b).sqrt()) as f32
}

/// Tolerances, measured on these fixtures (logits up to about 19): f32 differs only by RoPE's
/// formulation (rotating interleaved pairs of permuted weights instead of halves, and llama's
/// per-frequency factors multiplied instead of computed): 2e-5. f16 weights: 0.02. Q8_0: 0.34.
/// Q4_0 moves random-weight logits as much as MLX's own 4-bit quantization does (4.6 to 4.8 on
/// the same fixtures): up to 5.8, correlation 0.956 to 0.965; a block unpacked in the wrong
/// order or with the wrong offset leaves the logits uncorrelated. Q4_K (the fixture's simple
/// quantizer, repacked exactly): up to 6.2, correlation 0.957 to 0.973. Q6_K (requantized to
/// 8-bit on load): up to 1.32, correlation 0.997 to 0.998.
fn check(arch: Arch) {
    for (gguf_type, max_difference, min_correlation) in [
        (GgufType::F32, 1e-3, 0.999_999),
        (GgufType::F16, 0.1, 0.9999),
        (GgufType::Q8_0, 1.0, 0.999),
        (GgufType::Q4_0, 10.0, 0.9),
        (GgufType::Q4K, 10.0, 0.9),
        (GgufType::Q6K, 2.0, 0.99),
    ] {
        let (difference, correlation) = compare(arch, gguf_type);
        assert!(
            difference <= max_difference && correlation >= min_correlation,
            "{arch:?} {gguf_type:?}: logits differ by up to {difference}, correlation {correlation}"
        );
    }
}

#[test]
fn llama_gguf_fixtures_agree_with_the_safetensors_fixture() {
    check(Arch::Llama);
}

#[test]
fn qwen2_gguf_fixtures_agree_with_the_safetensors_fixture() {
    check(Arch::Qwen2);
}

#[test]
fn qwen3_gguf_fixtures_agree_with_the_safetensors_fixture() {
    check(Arch::Qwen3);
}

/// The tokenizer, chat template and stop tokens rebuilt from the GGUF's metadata are the
/// fixture's own.
#[test]
fn the_gguf_tokenizer_template_and_stop_tokens_are_the_fixtures() {
    let dir = tempfile::tempdir().unwrap();
    let reference_dir = dir.path().join("safetensors");
    corral_fixture::generate(&options(Arch::Qwen3, Format::Safetensors), &reference_dir).unwrap();
    let gguf = dir.path().join("model.gguf");
    corral_fixture::generate(&options(Arch::Qwen3, Format::Gguf(GgufType::Q8_0)), &gguf).unwrap();
    let expected = LoadedModel::load(&reference_dir).unwrap();
    let found = LoadedModel::load(&gguf).unwrap();
    for text in [
        "Hello, world! 12345",
        "  leading and trailing spaces  ",
        "line one\nline two\n\n\ttabbed",
        "Café, naïve, 東京, Привет, 😀👍🏽",
        "fn main() { println!(\"{}\", 1 + 2); }",
        "<|im_start|>user\nhi<|im_end|>",
    ] {
        let a = expected.tokenizer.encode(text, false).unwrap();
        let b = found.tokenizer.encode(text, false).unwrap();
        assert_eq!(a.get_ids(), b.get_ids(), "{text:?}");
        assert_eq!(found.tokenizer.decode(b.get_ids(), false).unwrap(), text);
    }
    let messages = [
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "Hi there"}),
    ];
    let render = |loaded: &LoadedModel| {
        loaded
            .chat_template
            .as_ref()
            .unwrap()
            .render(&messages, None, true)
            .unwrap()
    };
    assert_eq!(render(&found), render(&expected));
    assert_eq!(found.eos_token_ids, expected.eos_token_ids);
}
