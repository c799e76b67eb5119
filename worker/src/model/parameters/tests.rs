//! Counts of the toolchain fixtures (tests/data/toolchain), in every layout the tools made,
//! against the `total_parameters` mlx_lm.convert wrote into its index and transformers'
//! `num_parameters()`.

use std::path::PathBuf;

use super::*;

/// The layouts counted: the GGUF files are counted by their own reader.
const LAYOUTS: &[&str] = &["hf", "mlx", "mlx-q4"];

fn fixture(arch: &str, layout: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/toolchain")
        .join(arch)
        .join(layout)
}

fn count_of(arch: &str, layout: &str) -> ParameterCount {
    let dir = fixture(arch, layout);
    let config = ModelConfig::load(&dir).unwrap();
    count(&dir, &config).unwrap()
}

/// The layouts of `arch` the tools made.
fn layouts(arch: &str) -> impl Iterator<Item = &'static str> + '_ {
    LAYOUTS
        .iter()
        .copied()
        .filter(move |layout| fixture(arch, layout).join("config.json").exists())
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
        // Only mlx_lm.convert's layout carries mlx-lm's count.
        let Ok(index) = std::fs::read_to_string(
            arch_dir
                .join("mlx")
                .join(corral_ipc::weight_files::INDEX_FILE),
        ) else {
            continue;
        };
        let index: serde_json::Value = serde_json::from_str(&index).unwrap();
        let mlx_lm_total = index["metadata"]["total_parameters"].as_u64().unwrap();
        // mlx-lm counts leaf modules only, which leaves out the parameters a module with
        // children holds itself: the gated DeltaNet's and Mamba-2's `A_log` and `dt_bias`
        // (`D` too), Gemma's and LFM2-MoE's expert scales and biases, MiniMax-M2's routing bias.
        let outside_leaves: u64 = crate::model::weights::tensor_headers(&arch_dir.join("mlx"))
            .unwrap()
            .iter()
            .filter(|(name, _)| {
                [
                    ".sinks",
                    ".A_log",
                    ".dt_bias",
                    ".D",
                    ".router.scale",
                    ".per_expert_scale",
                    ".layer_scalar",
                    ".expert_bias",
                    ".block_sparse_moe.e_score_correction_bias",
                ]
                .iter()
                .any(|end| name.ends_with(end))
            })
            .map(|(_, header)| header.elements())
            .sum();
        let expected = mlx_lm_total + outside_leaves;
        // mlx_lm.convert leaves ERNIE 4.5's routers' correction biases out of its files
        // (index.json's `mlx_drops`): the Hugging Face layout holds them besides.
        let dropped: u64 = crate::model::weights::tensor_headers(&arch_dir.join("hf"))
            .unwrap()
            .iter()
            .filter(|(name, _)| {
                arch == "ernie4_5_moe" && name.ends_with(".e_score_correction_bias")
            })
            .map(|(_, header)| header.elements())
            .sum();
        for layout in layouts(arch) {
            let expected = if layout == "hf" {
                expected + dropped
            } else {
                expected
            };
            assert_eq!(count_of(arch, layout).total, expected, "{arch}/{layout}");
            checked += 1;
        }
    }
    assert!(
        checked >= 45,
        "only {checked} fixtures found under {}",
        root.display()
    );
}

#[test]
fn a_mixture_of_experts_runs_top_k_of_its_routed_experts_and_all_the_rest() {
    // transformers' `num_parameters()`; each MoE layer routes to 2 of 4 experts, each gate, up
    // and down 64 × 64: qwen3_moe and mixtral 2 such layers.
    let routed = 2 * 4 * 3 * 64 * 64;
    for (arch, total) in [("qwen3_moe", 140_160), ("mixtral", 140_096)] {
        for layout in layouts(arch) {
            let counted = count_of(arch, layout);
            assert_eq!(
                (counted.total, counted.active),
                (total, Some(total - routed + routed * 2 / 4)),
                "{arch}/{layout}"
            );
        }
    }
    // glm4_moe: 2 MoE layers after a dense one, their shared expert runs for every token;
    // transformers' 189_760 and the router's 2 × 4 score biases, which it keeps as buffers and
    // the checkpoint holds. llama4: one of 4 experts in 2 layers, its shared expert too, and the
    // vision tower of the original layout does not count (transformers counts 226_880 with it).
    let glm_total = 189_760 + 2 * 4;
    let glm = count_of("glm4_moe", "hf");
    assert_eq!(
        (glm.total, glm.active),
        (glm_total, Some(glm_total - routed + routed * 2 / 4))
    );
    let llama4 = count_of("llama4", "hf");
    assert_eq!(
        (llama4.total, llama4.active),
        (214_080, Some(214_080 - routed + routed / 4))
    );
    assert_eq!(count_of("qwen3", "mlx").active, None);
}

#[test]
fn hybrid_and_gemma4_mixtures_run_top_k_of_their_routed_experts() {
    // Each of these fixtures routes to 2 of 4 experts.
    for arch in ["qwen3_next", "qwen3_5_moe", "gemma4", "lfm2_moe"] {
        let headers = tensor_headers(&fixture(arch, "hf")).unwrap();
        let routed: u64 = headers
            .iter()
            .filter(|(name, _)| is_routed_expert(name))
            .map(|(_, header)| header.elements())
            .sum();
        assert!(routed > 0, "{arch}: no routed experts");
        for layout in layouts(arch) {
            let counted = count_of(arch, layout);
            assert_eq!(
                counted.active,
                Some(counted.total - routed + routed * 2 / 4),
                "{arch}/{layout}"
            );
        }
    }
    assert_eq!(count_of("qwen3_5", "hf").active, None);
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
