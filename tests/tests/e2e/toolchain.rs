//! Every architecture in the layouts users download, made by the tools that make those files
//! (`tests/data/toolchain/`, from `cargo xtask reference`: transformers' config classes and
//! `save_pretrained` for the Hugging Face layout, `mlx_lm.convert` for the mlx-community float
//! and 4-bit ones, llama.cpp's `convert_hf_to_gguf.py` and `llama-quantize` for the GGUF ones),
//! agrees with each layout's own implementation: transformers' logits for `hf`, mlx-lm's for
//! `mlx` and `mlx-q4`, llama.cpp's for `gguf-*`, at every prompt position and greedy decode step.
//! A GGUF layout's directory holds one `model.gguf`, loaded as a GGUF file with its tokenizer.
//! Its F16 and quantized types are held to llama.cpp's logits within the noise the type puts on
//! llama.cpp's own (its CPU kernels round activations to f16 or 8 bits; corral's do not). Each
//! architecture's served float layout, and the F32 GGUFs of the models with recurrent layers or
//! latent attention, are also held to their references in a batch and after a prefix-cache
//! restore (the checks are `logit_checks.rs`').
//!
//! Where mlx-lm's float logits depart from transformers' on the same weights (mlx-lm 0.32.2
//! ignores transformers 5's `rope_parameters` in several architectures), or llama.cpp's F32 ones
//! by its rounding alone (its CPU GELU reads an f16 table), transformers decides: that layout is
//! held to transformers' logits, and a 4-bit twin to them within the quantization's noise. A
//! GGUF whose architecture is not served fails the test. A layout a tool could not make is listed in `index.json` with the
//! tool's error; every served architecture must have at least its Hugging Face layout, unless
//! `index.json` names it with the reason (`cannot_make`, `pending`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use corral_worker::describe::{describe, layers_cache_size};
use corral_worker::gguf::{self, GgufHeader, GgufModel};
use corral_worker::model::{Model, SUPPORTED_ARCHITECTURES, layer_caches_for};
use mlx_rs::Dtype;
use serde_json::Value;

use crate::logit_checks::{
    check_after_restore, check_in_batch, check_quantized, largest_difference, read_reference,
    rows_alone,
};

/// Float layouts: the same weights in float32 on both sides, summed in another order.
const FLOAT_TOLERANCE: f32 = 1e-3;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/toolchain")
}

#[test]
fn every_layout_the_real_tools_make_matches_its_own_implementation() {
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(data().join("index.json")).unwrap()).unwrap();
    let architectures = index["architectures"].as_object().unwrap();
    let mut served_with_hf = BTreeSet::new();
    let mut table = Vec::new();
    // Every layout is tried, so that one failure does not hide the next.
    let mut failures = Vec::new();
    for (architecture, entry) in architectures {
        let Some(layouts) = entry["layouts"].as_object() else {
            table.push(format!("{architecture}: not made: {}", entry["not_made"]));
            continue;
        };
        for (layout, record) in layouts {
            let name = format!("{architecture}/{layout}");
            if let Some(why) = record.get("not_made") {
                table.push(format!("{name}: not made: {why}"));
                continue;
            }
            let dir = data().join(architecture).join(layout);
            let gguf = dir.join("model.gguf");
            // A GGUF whose architecture corral does not serve fails unless index.json names it
            // as pending, with the reason.
            let gguf_arch = GgufHeader::read(&gguf)
                .ok()
                .and_then(|header| header.architecture().map(str::to_owned));
            if let Some(arch) =
                gguf_arch.filter(|arch| !gguf::architectures().contains(&arch.as_str()))
            {
                match index["pending_gguf"].get(&arch).and_then(Value::as_str) {
                    Some(why) => table.push(format!("{name}: GGUF {arch:?} pending: {why}")),
                    None => failures.push(format!("{name}: GGUF architecture {arch:?} not served")),
                }
                continue;
            }
            let loaded = if gguf.exists() {
                GgufModel::load(&gguf)
                    .map(|loaded| loaded.model)
                    .map_err(|e| e.to_string())
            } else {
                Model::load(&dir).map_err(|e| e.to_string())
            };
            let model = match loaded {
                Ok(model) => model,
                Err(error) => {
                    failures.push(format!("{name}: {error}"));
                    continue;
                }
            };
            // The memory estimate's cache sizes, read from the config alone, are the built
            // layers' own.
            match layer_caches_for(&model.config) {
                Ok(caches) if caches == model.layer_caches() => {}
                Ok(caches) => failures.push(format!(
                    "{name}: the config gives caches {caches:?}, the built layers {:?}",
                    model.layer_caches()
                )),
                Err(error) => failures.push(format!("{name}: caches from the config: {error}")),
            }
            // ... and `describe` gives the supervisor those sizes in the model's own type.
            let described = describe(if gguf.exists() { &gguf } else { &dir }).cache;
            let element_bytes = match model.dtype() {
                Dtype::Float32 => 4,
                _ => 2,
            };
            let built = layers_cache_size(&model.layer_caches(), element_bytes);
            if described.as_ref() != Some(&built) {
                failures.push(format!(
                    "{name}: described caches {described:?}, the built model's {built:?}"
                ));
            }
            let reference_layout = record["reference_layout"].as_str().unwrap_or(layout);
            let reference = read_reference(&data().join(architecture).join(reference_layout));
            let rows = rows_alone(&model, &reference);
            let difference = largest_difference(&rows, &reference);
            match record.get("quantization_bound").and_then(Value::as_f64) {
                Some(bound) => match check_quantized(&name, &rows, &reference, bound as f32) {
                    Ok(compared) => table.push(format!(
                        "{name}: against {reference_layout}'s reference: prompt noise within \
                         {bound}, {compared} greedy steps compared, largest difference {difference:.1e}"
                    )),
                    Err(failure) => failures.push(failure),
                },
                None if difference > FLOAT_TOLERANCE => failures.push(format!(
                    "{name}: differs from {reference_layout}'s reference by {difference} \
                     (tolerance {FLOAT_TOLERANCE})"
                )),
                None => table.push(format!("{name}: largest difference {difference:.1e}")),
            }
            if layout == "hf" {
                served_with_hf.insert(entry["model_type"].as_str().unwrap().to_owned());
            }
        }
    }
    eprintln!("checked:\n{}", table.join("\n"));
    assert!(failures.is_empty(), "failed:\n{}", failures.join("\n"));
    // A served architecture without transformers' checkpoint is named in index.json with the
    // reason: the tools cannot make it, or corral does not yet serve it as they do.
    let excused = |name: &str| {
        ["cannot_make", "pending"]
            .iter()
            .find_map(|list| index[*list].get(name).and_then(Value::as_str))
    };
    for served in SUPPORTED_ARCHITECTURES {
        if served_with_hf.contains(*served) {
            continue;
        }
        match excused(served) {
            Some(why) => eprintln!("{served}: no checkpoint from transformers: {why}"),
            None => panic!("{served} is served but has no checkpoint made by transformers"),
        }
    }
}

/// llama.cpp's F32 GGUFs of the models with recurrent layers (the gated-DeltaNet hybrids
/// Qwen3.5 dense and MoE and Qwen3-Next; LFM2 and LFM2-MoE's short convolutions; the Mamba-2
/// hybrids Nemotron 3 and Granite 4), restored from
/// the snapshots their layers record at block boundaries, and of latent attention (DeepSeek V3,
/// GLM-4.7-Flash: a cached latent and rotary key per position), held to llama.cpp's logits within
/// 1e-3 also while each decode step shares its pass with three other sequences, and after the
/// prompt's first blocks are restored from the prefix cache.
#[test]
fn gguf_recurrent_and_latent_attention_models_batch_and_restore() {
    let mut checked = Vec::new();
    for architecture in [
        "qwen3_5",
        "qwen3_5_moe",
        "qwen3_next",
        "lfm2",
        "lfm2_moe",
        "deepseek_v3",
        "glm4_moe_lite",
        "nemotron_h_moe",
        "granitemoehybrid",
    ] {
        let name = format!("{architecture}/gguf-f32");
        let dir = data().join(architecture).join("gguf-f32");
        let model = GgufModel::load(&dir.join("model.gguf"))
            .unwrap_or_else(|error| panic!("{name}: {error}"))
            .model;
        let reference = read_reference(&dir);
        let in_batch = check_in_batch(&name, &model, &reference);
        let restored = check_after_restore(&name, &model, &reference);
        checked.push(format!(
            "{name}: largest differences in a batch {in_batch:.1e}, after a restore {restored:.1e}"
        ));
    }
    eprintln!("checked against llama.cpp:\n{}", checked.join("\n"));
}

/// Every architecture's served float layout (mlx-lm's `mlx` where `mlx_lm.convert` makes it, else
/// transformers' `hf`), held to its reference within 1e-3 while each decode step shares its pass
/// with three other sequences (one of them prefilling), and after the prompt's first two blocks
/// are restored from the prefix cache, the second through the SSD tier's payload: sliding
/// windows (Gemma 2's soft-capped scores too), latent attention, shared keys and values, the
/// gated DeltaNet's and LFM2's recurrent layers from their boundary snapshots mid-chunk, and
/// Phi-3's longrope, whose prompt within `original_max_position_embeddings` (32) rotates with the
/// short factors and whose greedy steps past it with the long ones, over keys cached with the
/// short ones. The Mamba-2 hybrids are checked so in every layout by `mamba2.rs`.
#[test]
fn every_architecture_holds_its_reference_in_a_batch_and_after_a_restore() {
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(data().join("index.json")).unwrap()).unwrap();
    let mut checked = Vec::new();
    for (architecture, entry) in index["architectures"].as_object().unwrap() {
        if crate::mamba2::ARCHITECTURES.contains(&architecture.as_str()) {
            continue;
        }
        let Some((layout, record)) = ["mlx", "hf"].into_iter().find_map(|layout| {
            let record = &entry["layouts"][layout];
            (record.is_object() && record.get("not_made").is_none()).then_some((layout, record))
        }) else {
            panic!("{architecture}: neither mlx nor hf was made");
        };
        let name = format!("{architecture}/{layout}");
        let reference_layout = record["reference_layout"].as_str().unwrap_or(layout);
        let reference = read_reference(&data().join(architecture).join(reference_layout));
        let model = Model::load(&data().join(architecture).join(layout))
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        let in_batch = check_in_batch(&name, &model, &reference);
        let restored = check_after_restore(&name, &model, &reference);
        checked.push(format!(
            "{name}: largest differences in a batch {in_batch:.1e}, after a restore {restored:.1e}"
        ));
    }
    eprintln!("checked:\n{}", checked.join("\n"));
}
