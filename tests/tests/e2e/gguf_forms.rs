//! The other forms a GGUF takes, made by llama.cpp's own tools from the toolchain fixtures
//! (`tests/data/gguf_forms/`, by `scripts/reference/gguf_forms.py` from `cargo xtask reference`):
//! a model split in three parts by the converter's `--split-max-tensors` loads as one, to the
//! single file's logits exactly, and a missing part is an error naming it; the projections the
//! converter fuses on request (`--fuse-qkv`: `attn_qkv`, with its bias for gpt-oss;
//! `--fuse-gate-up-exps`: `ffn_gate_up_exps`) load, split along the rows of their quantized
//! blocks (Q4_1, Q8_0, beside MXFP4 experts), to the logits of the same model unfused through
//! the same `llama-quantize` type, exactly; gpt-oss's experts as ggml's MXFP4 blocks
//! (`llama-quantize MXFP4_MOE`) hold llama.cpp's logits within the noise its 8-bit activations
//! put on them.

use std::path::{Path, PathBuf};

use corral_worker::gguf::{GgufHeader, GgufModel};
use serde_json::Value;

use crate::logit_checks::{check_alone, check_quantized, read_reference, rows_alone};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gguf_forms")
}

fn toolchain(arch: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/toolchain")
        .join(arch)
        .join("gguf-f32")
}

fn split_part(number: u32) -> PathBuf {
    data()
        .join("split")
        .join(format!("model-{number:05}-of-00003.gguf"))
}

/// The logits of `arch`'s reference prompt, as `path` loads.
fn prompt_logits(path: &Path, arch: &str) -> Vec<Vec<f32>> {
    let model = GgufModel::load(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .model;
    let tokens = read_reference(&toolchain(arch)).prompt;
    let mut cache = model.new_cache();
    let hidden = model.hidden_states(&tokens, &mut cache).unwrap();
    crate::reference_logits::host_rows(&model.logits(&hidden).unwrap())
}

#[test]
fn a_split_gguf_loads_as_one_model_with_the_single_files_logits() {
    let single_file = toolchain("qwen3_moe").join("model.gguf");
    let single = GgufHeader::read(&single_file).unwrap();
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
    let description = corral_worker::describe::describe(&split_part(1));
    assert_eq!(description.unservable, None);
    assert_eq!(description.size_bytes, part_bytes);
    assert_eq!(description.gguf_loaded_bytes, loaded);

    assert_eq!(
        prompt_logits(&split_part(1), "qwen3_moe"),
        prompt_logits(&single_file, "qwen3_moe")
    );
    let model = GgufModel::load(&split_part(1)).unwrap().model;
    let reference = read_reference(&toolchain("qwen3_moe"));
    let alone = check_alone("qwen3_moe split", &model, &reference);
    eprintln!("qwen3_moe split: largest difference from llama.cpp's logits {alone:.1e}");
}

#[test]
fn a_split_gguf_with_a_missing_part_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for number in [1, 2] {
        let from = split_part(number);
        std::fs::copy(&from, dir.path().join(from.file_name().unwrap())).unwrap();
    }
    let first = dir.path().join("model-00001-of-00003.gguf");
    let error = GgufModel::load(&first).err().unwrap().to_string();
    assert!(
        error.contains("part 3 of 3 is missing") && error.contains("model-00003-of-00003.gguf"),
        "{error}"
    );
    let second = GgufHeader::read(&dir.path().join("model-00002-of-00003.gguf"))
        .err()
        .unwrap()
        .to_string();
    assert!(second.contains("give its first part"), "{second}");
    let description = corral_worker::describe::describe(&first);
    assert!(
        description
            .unservable
            .as_deref()
            .is_some_and(|reason| reason.contains("model-00003-of-00003.gguf")),
        "{:?}",
        description.unservable
    );
}

/// Each fused file against its unfused twin through the same quantizer: the fused tensors are
/// there, no separate q, k or v, and the prompt's logits are the twin's exactly.
#[test]
fn fused_projections_load_to_the_unfused_files_logits() {
    let fused = data().join("fused");
    let names = |path: &Path| -> Vec<String> {
        let header = GgufHeader::read(path).unwrap();
        header
            .tensors
            .iter()
            .map(|tensor| tensor.name.clone())
            .collect()
    };
    for (arch, kind, fused_tensors, types) in [
        (
            "qwen3_moe",
            "q4_1",
            &["blk.1.attn_qkv.weight"][..],
            &["Q4_1"][..],
        ),
        (
            "qwen3_5_moe",
            "q8_0",
            &["blk.3.attn_qkv.weight", "blk.1.ffn_gate_up_exps.weight"][..],
            &["Q8_0"][..],
        ),
        (
            "gpt_oss",
            "mxfp4",
            &["blk.1.attn_qkv.weight", "blk.1.attn_qkv.bias"][..],
            &["MXFP4", "Q8_0"][..],
        ),
    ] {
        let file = fused.join(format!("{arch}-{kind}-fused.gguf"));
        let unfused = fused.join(format!("{arch}-{kind}.gguf"));
        let tensors = names(&file);
        for name in fused_tensors {
            assert!(
                tensors.iter().any(|tensor| tensor == name),
                "{arch}: {name}"
            );
        }
        // What is fused is not also there apart.
        let apart = |name: &str| {
            if name.contains("ffn_gate_up_exps") {
                "ffn_gate_exps"
            } else {
                "attn_q."
            }
        };
        for name in fused_tensors {
            assert!(
                !tensors.iter().any(|tensor| tensor.contains(apart(name))),
                "{arch}: {tensors:?}"
            );
        }
        let summary = GgufHeader::read(&file).unwrap().quantization_summary();
        assert!(
            types.iter().all(|kind| summary.contains(kind)),
            "{arch}: {summary}"
        );
        assert_eq!(
            prompt_logits(&file, arch),
            prompt_logits(&unfused, arch),
            "{arch}"
        );
    }
}

/// gpt-oss with its experts as ggml's MXFP4 blocks, read into MLX's `mxfp4` mode without a
/// dequantization, held to llama.cpp's logits on that file as toolchain.rs holds a quantized
/// layout: the prompt's within the recorded bound, each greedy step whose lead exceeds the
/// noise the reference's token.
#[test]
fn gpt_oss_with_mxfp4_experts_holds_llama_cpps_logits() {
    let dir = data().join("mxfp4");
    let file = dir.join("model.gguf");
    let summary = GgufHeader::read(&file).unwrap().quantization_summary();
    assert!(summary.contains("MXFP4"), "{summary}");
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(data().join("index.json")).unwrap()).unwrap();
    let bound = index["mxfp4"]["quantization_bound"].as_f64().unwrap() as f32;
    let model = GgufModel::load(&file).unwrap().model;
    let reference = read_reference(&dir);
    let rows = rows_alone(&model, &reference);
    let compared = check_quantized("gpt_oss mxfp4", &rows, &reference, bound)
        .unwrap_or_else(|failure| panic!("{failure}"));
    eprintln!("gpt_oss mxfp4: within {bound}, {compared} greedy steps compared");
}
