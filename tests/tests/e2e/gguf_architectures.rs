//! GGUF for the architectures beyond llama and qwen: each tiny mlx-lm checkpoint of
//! `tests/data/architectures/<arch>/f32`, written as llama.cpp's converter writes it
//! (`tests/data/gguf_architectures/`, by `scripts/reference/gguf_architectures.py` from
//! `cargo xtask reference`: llama.cpp's tensor names, stacked experts, Gemma 3's `1 + w` norms,
//! Gemma 4's per-layer inputs, shared KV and `rope_freqs`, the permuted q/k of granite, Mixtral
//! (a `llama` with experts), SmolLM3 and Ministral 3 (`mistral3`, YaRN and its query
//! temperature), Llama 4's `feed_forward` blocks and `rope_freqs`, Phi-3's fused projections and longrope factor tensors), must give
//! mlx-lm's logits within the architectures' tolerance (1e-3) at every prompt position and
//! decode step, alone and in a batch of four; gpt-oss also with its experts in MXFP4. A model split in three parts by gguf-py
//! (`split/qwen3_moe-0000N-of-00003.gguf`) loads as one, to the single file's logits exactly; a
//! missing part is an error naming it. The projections llama.cpp's converter fuses on request
//! (`attn_qkv`, `ffn_gate_up_exps`; `fused/`) load to the unfused file's logits exactly, quantized
//! (Q4_1, Q8_0, MXFP4) or not.

use std::path::{Path, PathBuf};

use corral_worker::gguf::{GgufHeader, GgufModel};

use crate::architectures::{check_alone, check_in_batch, data, read_reference};

fn gguf_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gguf_architectures")
}

/// Loads `file` and checks it against the mlx-lm reference of `arch`'s `variant`.
fn check(arch: &str, variant: &str, file: &Path) -> String {
    let reference = read_reference(&data().join(arch).join(variant));
    let model = GgufModel::load(file)
        .unwrap_or_else(|error| panic!("{arch}: {error}"))
        .model;
    let name = format!("{arch} {variant} (GGUF)");
    let alone = check_alone(&name, &model, &reference);
    let in_batch = check_in_batch(&name, &model, &reference);
    format!("{name}: largest differences alone {alone:.1e}, in a batch {in_batch:.1e}")
}

#[test]
fn each_architecture_from_gguf_matches_mlx_lm() {
    let checked: Vec<String> = [
        "qwen3_moe",
        "gemma3_text",
        "gemma4_text",
        "gemma4_text_moe",
        "gpt_oss",
        "glm4_moe",
        "phi3",
        "granite",
        "mixtral",
        "smollm3",
        "ministral3_text",
        "llama4_gguf",
    ]
    .iter()
    .map(|arch| check(arch, "f32", &gguf_data().join(format!("{arch}.gguf"))))
    .collect();
    eprintln!("checked against mlx-lm:\n{}", checked.join("\n"));
}

/// gpt-oss with its experts as ggml's MXFP4 blocks (from the `mxfp4` variant, whose values
/// gguf-py's dequantization reproduces exactly), read into MLX's `mxfp4` mode without a
/// dequantization: mlx-lm's logits on that variant within the same 1e-3.
#[test]
fn gpt_oss_with_mxfp4_experts_from_gguf_matches_mlx_lm() {
    let file = gguf_data().join("gpt_oss_mxfp4.gguf");
    let header = GgufHeader::read(&file).unwrap();
    assert!(
        header.quantization_summary().contains("MXFP4"),
        "{}",
        header.quantization_summary()
    );
    eprintln!("{}", check("gpt_oss", "mxfp4", &file));
}

fn split_part(number: u32) -> PathBuf {
    gguf_data()
        .join("split")
        .join(format!("qwen3_moe-{number:05}-of-00003.gguf"))
}

#[test]
fn a_split_gguf_loads_as_one_model_with_the_single_files_logits() {
    let single = GgufHeader::read(&gguf_data().join("qwen3_moe.gguf")).unwrap();
    let split = GgufHeader::read(&split_part(1)).unwrap();
    assert_eq!(split.tensors.len(), single.tensors.len());
    let files: std::collections::BTreeSet<_> = split
        .tensors
        .iter()
        .map(|tensor| tensor.file.clone())
        .collect();
    assert_eq!(files.len(), 3, "tensors from every part");
    let part_bytes: u64 = (1..=3)
        .map(|number| std::fs::metadata(split_part(number)).unwrap().len())
        .sum();
    assert_eq!(split.file_bytes, part_bytes);
    let loaded = corral_worker::gguf::loaded_bytes(&split);
    assert_eq!(loaded, corral_worker::gguf::loaded_bytes(&single));
    eprintln!("{}", check("qwen3_moe", "f32", &split_part(1)));
    let description = corral_worker::describe::describe(&split_part(1));
    assert_eq!(description.unservable, None);
    assert_eq!(description.size_bytes, part_bytes);
    assert_eq!(description.gguf_loaded_bytes, loaded);

    assert_eq!(
        prompt_logits(&split_part(1), "qwen3_moe"),
        prompt_logits(&gguf_data().join("qwen3_moe.gguf"), "qwen3_moe")
    );
}

/// The logits of `arch`'s reference prompt, as `path` loads.
fn prompt_logits(path: &Path, arch: &str) -> Vec<Vec<f32>> {
    let model = GgufModel::load(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .model;
    let tokens = read_reference(&data().join(arch).join("f32")).prompt;
    let mut cache = model.new_cache();
    let hidden = model.hidden_states(&tokens, &mut cache).unwrap();
    crate::reference_logits::host_rows(&model.logits(&hidden).unwrap())
}

/// `attn_qkv` (weights and biases) and `ffn_gate_up_exps`, as convert_hf_to_gguf.py's
/// `--fuse-qkv` and `--fuse-gate-up-exps` write them, split at load along the rows of their
/// blocks: qwen3_moe with q, k, v in Q4_1 and expert gate and up in Q8_0, gpt-oss with MXFP4
/// experts and q, k, v biases, each to the logits of the same file unfused, exactly.
#[test]
fn fused_projections_load_to_the_unfused_files_logits() {
    let fused = gguf_data().join("fused");
    let names = |path: &Path| -> Vec<String> {
        let header = GgufHeader::read(path).unwrap();
        header
            .tensors
            .iter()
            .map(|tensor| tensor.name.clone())
            .collect()
    };
    for (arch, unfused, file) in [
        (
            "qwen3_moe",
            fused.join("qwen3_moe_quantized.gguf"),
            fused.join("qwen3_moe_quantized_fused.gguf"),
        ),
        (
            "gpt_oss",
            gguf_data().join("gpt_oss_mxfp4.gguf"),
            fused.join("gpt_oss_mxfp4_fused.gguf"),
        ),
    ] {
        let tensors = names(&file);
        for name in ["blk.1.attn_qkv.weight", "blk.1.ffn_gate_up_exps.weight"] {
            assert!(
                tensors.iter().any(|tensor| tensor == name),
                "{arch}: {name}"
            );
        }
        assert!(!tensors.iter().any(|tensor| tensor.contains("attn_q.")));
        assert_eq!(
            prompt_logits(&file, arch),
            prompt_logits(&unfused, arch),
            "{arch}"
        );
    }
    let header = GgufHeader::read(&fused.join("qwen3_moe_quantized_fused.gguf")).unwrap();
    let summary = header.quantization_summary();
    assert!(
        summary.contains("Q4_1") && summary.contains("Q8_0"),
        "{summary}"
    );
}

#[test]
fn a_split_gguf_with_a_missing_part_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for number in [1, 2] {
        let from = split_part(number);
        std::fs::copy(&from, dir.path().join(from.file_name().unwrap())).unwrap();
    }
    let first = dir.path().join("qwen3_moe-00001-of-00003.gguf");
    let error = GgufModel::load(&first).err().unwrap().to_string();
    assert!(
        error.contains("part 3 of 3 is missing") && error.contains("qwen3_moe-00003-of-00003.gguf"),
        "{error}"
    );
    let second = GgufHeader::read(&dir.path().join("qwen3_moe-00002-of-00003.gguf"))
        .err()
        .unwrap()
        .to_string();
    assert!(second.contains("give its first part"), "{second}");
    let description = corral_worker::describe::describe(&first);
    assert!(
        description
            .unservable
            .as_deref()
            .is_some_and(|reason| reason.contains("qwen3_moe-00003-of-00003.gguf")),
        "{:?}",
        description.unservable
    );
}
