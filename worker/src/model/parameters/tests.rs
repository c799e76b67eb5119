//! Counts of the architecture fixtures (tests/data/architectures), in every layout and
//! quantization, against the `total_parameters` mlx-lm wrote into their index.

use std::path::PathBuf;

use super::*;

fn fixture(arch: &str, variant: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/architectures")
        .join(arch)
        .join(variant)
}

fn count_of(arch: &str, variant: &str) -> ParameterCount {
    let dir = fixture(arch, variant);
    let config = ModelConfig::load(&dir).unwrap();
    count(&dir, &config).unwrap()
}

/// mlx-lm's count from the f32 fixture's index.
fn mlx_lm_total(arch: &str) -> u64 {
    let index =
        std::fs::read_to_string(fixture(arch, "f32").join(corral_ipc::weight_files::INDEX_FILE))
            .unwrap();
    let index: serde_json::Value = serde_json::from_str(&index).unwrap();
    index["metadata"]["total_parameters"].as_u64().unwrap()
}

#[test]
fn every_layout_and_quantization_counts_the_parameters_mlx_lm_counts() {
    let root = fixture("", "");
    let mut checked = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let arch_dir = entry.unwrap().path();
        let Some(arch) = arch_dir.file_name().and_then(|name| name.to_str()) else {
            continue;
        };
        if ModelConfig::load(&arch_dir.join("f32")).is_err() {
            continue; // not a directory of variants, or an architecture not served
        }
        // mlx-lm counts leaf modules only, which leaves out the parameters a module with
        // children holds itself: gpt-oss's attention sinks, the gated DeltaNet's `A_log` and
        // `dt_bias`, Gemma 4's router scale, expert scales and layer scalars, LFM2-MoE's
        // `expert_bias`.
        let outside_leaves: u64 = crate::model::weights::tensor_headers(&arch_dir.join("f32"))
            .unwrap()
            .iter()
            .filter(|(name, _)| {
                [
                    ".sinks",
                    ".A_log",
                    ".dt_bias",
                    ".router.scale",
                    ".per_expert_scale",
                    ".layer_scalar",
                    ".expert_bias",
                ]
                .iter()
                .any(|end| name.ends_with(end))
            })
            .map(|(_, header)| header.elements())
            .sum();
        let expected = mlx_lm_total(arch) + outside_leaves;
        for variant in std::fs::read_dir(&arch_dir).unwrap() {
            let variant = variant.unwrap().file_name().into_string().unwrap();
            assert_eq!(count_of(arch, &variant).total, expected, "{arch}/{variant}");
            checked += 1;
        }
    }
    assert!(
        checked >= 30,
        "only {checked} fixtures found under {}",
        root.display()
    );
}

#[test]
fn a_mixture_of_experts_runs_top_k_of_its_routed_experts_and_all_the_rest() {
    // qwen3_moe: layer 1 routes to 2 of 4 experts, each gate, up and down 64 × 64.
    let routed = 4 * 3 * 64 * 64;
    let total = 103_040;
    let expected = total - routed + routed * 2 / 4;
    for variant in ["f32", "q4", "hf"] {
        let counted = count_of("qwen3_moe", variant);
        assert_eq!(
            (counted.total, counted.active),
            (total, Some(expected)),
            "{variant}"
        );
    }
    // glm4_moe: its shared expert runs for every token; llama4: one of 4 experts, its shared
    // expert too, and the vision tower of the original layout does not count.
    let glm = count_of("glm4_moe", "f32");
    assert_eq!(
        glm.active,
        Some(115_588 - 4 * 3 * 64 * 64 + 2 * 3 * 64 * 64)
    );
    for variant in ["f32", "hf"] {
        let llama4 = count_of("llama4", variant);
        let routed = 2 * 4 * 3 * 64 * 64;
        assert_eq!(
            (llama4.total, llama4.active),
            (214_080, Some(214_080 - routed + routed / 4)),
            "{variant}"
        );
    }
    assert_eq!(count_of("qwen3", "f32").active, None);
}

#[test]
fn hybrid_and_gemma4_mixtures_run_top_k_of_their_routed_experts() {
    // Each of these fixtures routes to 2 of 4 experts.
    for arch in ["qwen3_next", "qwen3_5_moe", "gemma4_text_moe", "lfm2_moe"] {
        let headers = tensor_headers(&fixture(arch, "f32")).unwrap();
        let routed: u64 = headers
            .iter()
            .filter(|(name, _)| is_routed_expert(name))
            .map(|(_, header)| header.elements())
            .sum();
        assert!(routed > 0, "{arch}: no routed experts");
        for variant in ["f32", "q4", "hf"] {
            let counted = count_of(arch, variant);
            assert_eq!(
                counted.active,
                Some(counted.total - routed + routed * 2 / 4),
                "{arch}/{variant}"
            );
        }
    }
    assert_eq!(count_of("qwen3_5", "f32").active, None);
}

/// Granite 4's experts fuse their gate and up projections in `block_sparse_moe.input_linear`,
/// beside a shared MLP with the same names under `shared_mlp` (tests/data/toolchain).
#[test]
fn granite_4s_fused_experts_are_routed_and_its_shared_mlp_is_not() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/toolchain/granitemoehybrid/hf");
    let headers = tensor_headers(&dir).unwrap();
    let routed: u64 = headers
        .iter()
        .filter(|(name, _)| name.contains(".block_sparse_moe.") && !name.contains(".router."))
        .map(|(_, header)| header.elements())
        .sum();
    assert!(routed > 0);
    let counted = count(&dir, &ModelConfig::load(&dir).unwrap()).unwrap();
    assert_eq!(
        counted.active,
        Some(counted.total - routed + routed * 2 / 4)
    );
}
