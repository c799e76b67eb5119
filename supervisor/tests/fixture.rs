//! `corral fixture` end to end: the checkpoint's bytes are stable, its tensors are named and shaped
//! the way each architecture's loaders expect, and quantization and dtypes keep the same weights.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use corral::fixture::{self, Arch, Bits, Dtype, FixtureError, FixtureOptions, Size};
use safetensors::{Dtype as StDtype, SafeTensors};
use serde_json::Value;
use sha2::{Digest, Sha256};

const FILES: [&str; 5] = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
];

fn options(arch: Arch, dtype: Dtype, quantize: Option<Bits>) -> FixtureOptions {
    FixtureOptions {
        size: Size::Tiny,
        arch,
        dtype,
        quantize,
    }
}

fn generate(options: FixtureOptions) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fixture::generate(&options, dir.path()).unwrap();
    dir
}

fn read(dir: &Path, file: &str) -> Vec<u8> {
    fs::read(dir.join(file)).unwrap()
}

fn config(dir: &Path) -> Value {
    serde_json::from_slice(&read(dir, "config.json")).unwrap()
}

/// A tensor's values as f32, whatever float type it is stored in.
fn floats(st: &SafeTensors, name: &str) -> Vec<f32> {
    let view = st.tensor(name).unwrap();
    let data = view.data();
    match view.dtype() {
        StDtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        StDtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        StDtype::BF16 => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => panic!("{name} is {other:?}, not a float"),
    }
}

/// Tensor names and shapes of the tiny fixture, written out independently of the generator.
fn expected_tiny_tensors(arch: Arch) -> BTreeMap<String, Vec<usize>> {
    let mut tensors = BTreeMap::from([
        ("model.embed_tokens.weight".to_owned(), vec![1024, 256]),
        ("model.norm.weight".to_owned(), vec![256]),
    ]);
    for layer in 0..4 {
        let p = format!("model.layers.{layer}");
        let mut add = |name: &str, shape: &[usize]| {
            tensors.insert(format!("{p}.{name}"), shape.to_vec());
        };
        add("input_layernorm.weight", &[256]);
        add("post_attention_layernorm.weight", &[256]);
        add("self_attn.q_proj.weight", &[256, 256]);
        add("self_attn.k_proj.weight", &[128, 256]);
        add("self_attn.v_proj.weight", &[128, 256]);
        add("self_attn.o_proj.weight", &[256, 256]);
        add("mlp.gate_proj.weight", &[512, 256]);
        add("mlp.up_proj.weight", &[512, 256]);
        add("mlp.down_proj.weight", &[256, 512]);
        match arch {
            Arch::Llama => {}
            Arch::Qwen2 => {
                add("self_attn.q_proj.bias", &[256]);
                add("self_attn.k_proj.bias", &[128]);
                add("self_attn.v_proj.bias", &[128]);
            }
            Arch::Qwen3 => {
                add("self_attn.q_norm.weight", &[32]);
                add("self_attn.k_norm.weight", &[32]);
            }
        }
    }
    if arch == Arch::Llama {
        tensors.insert("lm_head.weight".to_owned(), vec![1024, 256]);
    }
    tensors
}

#[test]
fn same_options_write_identical_bytes() {
    let options = options(Arch::Qwen2, Dtype::Bf16, Some(Bits::Four));
    let (first, second) = (generate(options), generate(options));
    for file in FILES {
        assert!(
            read(first.path(), file) == read(second.path(), file),
            "{file} differs"
        );
    }
}

#[test]
fn tiny_llama_f32_files_have_pinned_hashes() {
    // Any change to these is a change of the fixture that every test built on it sees: update
    // them only on purpose.
    let pinned = [
        (
            "config.json",
            "2cd5551a42a4c9e805d4ca3c7d62cea082c34880e08f35eff8fa3b0aa9ed0c75",
        ),
        (
            "generation_config.json",
            "b3889995b5b58d508b0f1366b1d95dd57233c5f23bca09af2b8739de521ea9b2",
        ),
        (
            "model.safetensors",
            "0fa53c33a8414a670660e9c8edb38b40a9299990b96be0a66b9144ed02283418",
        ),
        (
            "tokenizer.json",
            "71ed4ce766292f72ead8404bdb894c09e5e44817db00c269a7daffa23f843c5f",
        ),
        (
            "tokenizer_config.json",
            "f873ea2a4258e1286dc1b57447e2d02f3f0f2be1512b193b4b4d2782f69186dd",
        ),
    ];
    let dir = generate(options(Arch::Llama, Dtype::F32, None));
    let actual: Vec<(&str, String)> = FILES
        .iter()
        .map(|&file| {
            let digest = Sha256::digest(read(dir.path(), file));
            let hex = digest.iter().map(|b| format!("{b:02x}")).collect();
            (file, hex)
        })
        .collect();
    let pinned: Vec<(&str, String)> = pinned.iter().map(|&(f, h)| (f, h.to_owned())).collect();
    assert_eq!(actual, pinned);
}

#[test]
fn each_architecture_has_the_tensors_its_loaders_expect() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let dir = generate(options(arch, Dtype::F32, None));
        let bytes = read(dir.path(), "model.safetensors");
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let actual: BTreeMap<String, Vec<usize>> = st
            .tensors()
            .into_iter()
            .map(|(name, view)| {
                assert_eq!(view.dtype(), StDtype::F32, "{name}");
                (name, view.shape().to_vec())
            })
            .collect();
        assert_eq!(actual, expected_tiny_tensors(arch), "{arch:?}");
    }
}

#[test]
fn config_json_describes_each_architecture() {
    for (arch, model_type, class, tied, theta, eps) in [
        (
            Arch::Llama,
            "llama",
            "LlamaForCausalLM",
            false,
            500000.0,
            1e-5,
        ),
        (
            Arch::Qwen2,
            "qwen2",
            "Qwen2ForCausalLM",
            true,
            1000000.0,
            1e-6,
        ),
        (
            Arch::Qwen3,
            "qwen3",
            "Qwen3ForCausalLM",
            true,
            1000000.0,
            1e-6,
        ),
    ] {
        let dir = generate(options(arch, Dtype::Bf16, None));
        let c = config(dir.path());
        assert_eq!(c["model_type"], model_type);
        assert_eq!(c["architectures"][0], class);
        assert_eq!(c["tie_word_embeddings"], tied);
        assert_eq!(c["rope_theta"], theta);
        assert_eq!(c["rms_norm_eps"], eps);
        assert_eq!(c["torch_dtype"], "bfloat16");
        assert_eq!(c["hidden_size"], 256);
        assert_eq!(c["intermediate_size"], 512);
        assert_eq!(c["num_hidden_layers"], 4);
        assert_eq!(c["num_attention_heads"], 8);
        assert_eq!(c["num_key_value_heads"], 4);
        assert_eq!(c["vocab_size"], 1024);
        assert_eq!(c["max_position_embeddings"], 8192);
        assert_eq!(c["bos_token_id"], 1021, "<|endoftext|>");
        assert_eq!(c["eos_token_id"], 1023, "<|im_end|>");
        assert!(c.get("quantization").is_none());
        assert_eq!(c["head_dim"].as_u64(), (arch != Arch::Qwen2).then_some(32));
    }
    let llama = config(generate(options(Arch::Llama, Dtype::F32, None)).path());
    assert_eq!(llama["rope_scaling"]["rope_type"], "llama3");
    assert_eq!(llama["rope_scaling"]["factor"], 8.0);
    assert_eq!(
        llama["rope_scaling"]["original_max_position_embeddings"],
        1024
    );
    assert_eq!(llama["attention_bias"], false);
    assert_eq!(llama["mlp_bias"], false);
}

#[test]
fn quantized_checkpoint_packs_matrices_and_keeps_vectors() {
    let dir = generate(options(Arch::Qwen2, Dtype::F16, Some(Bits::Four)));
    let c = config(dir.path());
    let expected_quantization = serde_json::json!({"group_size": 64, "bits": 4});
    assert_eq!(c["quantization"], expected_quantization);
    assert_eq!(c["quantization_config"], expected_quantization);
    let bytes = read(dir.path(), "model.safetensors");
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut seen = 0;
    for (name, shape) in expected_tiny_tensors(Arch::Qwen2) {
        let view = st.tensor(&name).unwrap();
        match shape[..] {
            [rows, cols] => {
                let stem = name.strip_suffix(".weight").unwrap();
                assert_eq!(view.dtype(), StDtype::U32, "{name}");
                assert_eq!(view.shape(), [rows, cols / 8], "{name}");
                for part in ["scales", "biases"] {
                    let side = st.tensor(&format!("{stem}.{part}")).unwrap();
                    assert_eq!(side.dtype(), StDtype::F16, "{stem}.{part}");
                    assert_eq!(side.shape(), [rows, cols / 64], "{stem}.{part}");
                    seen += 1;
                }
            }
            _ => {
                assert_eq!(view.dtype(), StDtype::F16, "{name}");
                assert_eq!(view.shape(), &shape[..], "{name}");
            }
        }
        seen += 1;
    }
    assert_eq!(
        st.len(),
        seen,
        "no tensors beyond weights, scales and biases"
    );
}

#[test]
fn dequantized_weights_are_within_half_a_step_of_the_unquantized_ones() {
    let plain_dir = generate(options(Arch::Llama, Dtype::F32, None));
    let plain_bytes = read(plain_dir.path(), "model.safetensors");
    let plain = SafeTensors::deserialize(&plain_bytes).unwrap();
    for bits in [Bits::Four, Bits::Eight] {
        let width = if bits == Bits::Four { 4 } else { 8 };
        let dir = generate(options(Arch::Llama, Dtype::F32, Some(bits)));
        let bytes = read(dir.path(), "model.safetensors");
        let st = SafeTensors::deserialize(&bytes).unwrap();
        for stem in [
            "model.embed_tokens",
            "model.layers.2.self_attn.k_proj",
            "model.layers.3.mlp.down_proj",
            "lm_head",
        ] {
            let original = floats(&plain, &format!("{stem}.weight"));
            let scales = floats(&st, &format!("{stem}.scales"));
            let biases = floats(&st, &format!("{stem}.biases"));
            let words: Vec<u32> = st
                .tensor(&format!("{stem}.weight"))
                .unwrap()
                .data()
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let per_word = 32 / width;
            for (i, &w) in original.iter().enumerate() {
                let code = (words[i / per_word] >> (width * (i % per_word))) & ((1 << width) - 1);
                let (scale, bias) = (scales[i / 64], biases[i / 64]);
                let error = (code as f32 * scale + bias - w).abs();
                assert!(error <= scale / 2.0 + 1e-6, "{stem}[{i}] off by {error}");
            }
        }
    }
}

#[test]
fn half_precision_weights_are_the_f32_weights_rounded() {
    let f32_dir = generate(options(Arch::Qwen3, Dtype::F32, None));
    let f32_bytes = read(f32_dir.path(), "model.safetensors");
    let reference = SafeTensors::deserialize(&f32_bytes).unwrap();
    for dtype in [Dtype::F16, Dtype::Bf16] {
        let dir = generate(options(Arch::Qwen3, dtype, None));
        let bytes = read(dir.path(), "model.safetensors");
        let st = SafeTensors::deserialize(&bytes).unwrap();
        for name in [
            "model.embed_tokens.weight",
            "model.layers.1.self_attn.q_norm.weight",
        ] {
            let rounded: Vec<f32> = floats(&reference, name)
                .into_iter()
                .map(|v| match dtype {
                    Dtype::F16 => half::f16::from_f32(v).to_f32(),
                    _ => half::bf16::from_f32(v).to_f32(),
                })
                .collect();
            assert!(floats(&st, name) == rounded, "{dtype:?} {name}");
        }
    }
}

#[test]
fn norm_gains_are_near_one_and_biases_small_but_nonzero() {
    let dir = generate(options(Arch::Qwen2, Dtype::F32, None));
    let bytes = read(dir.path(), "model.safetensors");
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let gains = floats(&st, "model.layers.0.input_layernorm.weight");
    assert!(gains.iter().all(|g| (0.94..=1.06).contains(g) && *g != 1.0));
    let bias = floats(&st, "model.layers.0.self_attn.k_proj.bias");
    assert!(bias.iter().all(|b| b.abs() < 0.1) && bias.iter().any(|&b| b != 0.0));
}

#[test]
fn output_directory_is_created_with_its_parents() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("a/b/tiny");
    fixture::generate(&options(Arch::Llama, Dtype::F16, None), &out).unwrap();
    assert!(FILES.iter().all(|file| out.join(file).is_file()));
}

#[test]
fn an_unusable_output_path_is_named_in_the_error() {
    let root = tempfile::tempdir().unwrap();
    let blocker = root.path().join("not-a-dir");
    fs::write(&blocker, "").unwrap();
    let out = blocker.join("model");
    let error = fixture::generate(&options(Arch::Llama, Dtype::F32, None), &out).unwrap_err();
    assert!(matches!(error, FixtureError::CreateDir { .. }), "{error:?}");
    assert!(
        error.to_string().contains(&*out.to_string_lossy()),
        "{error}"
    );
}
