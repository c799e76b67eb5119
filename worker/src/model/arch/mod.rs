//! One file per architecture, each reading its own config keys and wiring the blocks as mlx-lm's
//! file for the same `model_type` does. An architecture is added by writing its file and adding
//! its row to [`ARCHITECTURES`] (the GGUF names read as it, the builder, the experts and the caches
//! the memory estimate needs) and its `model_type` to `supported.rs`, which `config.rs` checks a
//! config against before any key (a test holds the two lists equal).

mod deepseek_v3;
mod ernie4_5_moe;
mod gemma2;
mod gemma3_text;
mod gemma4_text;
mod glm4;
mod glm4_moe;
mod gpt_oss;
mod granite;
mod granitemoehybrid;
mod lfm2;
mod lfm2_moe;
mod llama;
mod llama4;
mod llama4_text;
mod minimax_m2;
mod ministral3;
mod mistral3;
mod mixtral;
mod nemotron_h;
mod olmo3;
mod phi3;
mod qwen2;
mod qwen3;
mod qwen3_5;
mod qwen3_5_moe;
mod qwen3_moe;
mod qwen3_next;
mod seed_oss;
mod smollm3;

use super::blocks::moe::MoeSpec;
use super::config::ModelConfig;
use super::decoder::Decoder;
use super::error::ModelError;
use super::shape::{CacheShape, LayerCache};
use super::weights::Weights;
use super::window::Window;

type Build = fn(&ModelConfig, &mut Weights) -> Result<Decoder, ModelError>;

/// A mixture-of-experts architecture's routed experts, read from its config as its `build`
/// reads them (`None` when this config has none).
type Experts = fn(&ModelConfig) -> Result<Option<MoeSpec>, ModelError>;

/// What each layer keeps for a sequence, read from the config as `build` reads it, so the
/// memory estimate knows it before any weight is read.
type Caches = fn(&ModelConfig) -> Result<Vec<LayerCache>, ModelError>;

struct Architecture {
    model_type: &'static str,
    /// llama.cpp's `general.architecture` names of the GGUF files read as this type.
    gguf: &'static [&'static str],
    build: Build,
    experts: Option<Experts>,
    caches: Caches,
    /// Whether every block it is built of splits between tensor-parallel ranks as mlx-lm's
    /// `shard` splits it.
    splits_tensors: bool,
}

const fn dense(model_type: &'static str, build: Build) -> Architecture {
    Architecture {
        model_type,
        gguf: &[],
        build,
        experts: None,
        caches: full_attention_caches,
        splits_tensors: false,
    }
}

const fn moe(model_type: &'static str, build: Build, experts: Experts) -> Architecture {
    Architecture {
        model_type,
        gguf: &[],
        build,
        experts: Some(experts),
        caches: full_attention_caches,
        splits_tensors: false,
    }
}

impl Architecture {
    /// An architecture whose layers are not all full attention over `num_key_value_heads` heads
    /// of `head_dim`.
    const fn caching(self, caches: Caches) -> Self {
        Self { caches, ..self }
    }

    /// An architecture llama.cpp also writes, under these `general.architecture` names.
    const fn in_gguf(self, gguf: &'static [&'static str]) -> Self {
        Self { gguf, ..self }
    }

    /// An architecture built only of blocks that split between tensor-parallel ranks.
    const fn splitting_tensors(self) -> Self {
        Self {
            splits_tensors: true,
            ..self
        }
    }
}

/// Each layer's window: `window` (the architecture's `sliding_window`) for the layers
/// `layer_types` marks `sliding_attention`, or without `layer_types` those `slides_by_default`
/// picks by index (Gemma 2's even layers, Gemma 3's all but every sixth, gpt-oss's even layers).
fn sliding_windows(
    config: &ModelConfig,
    window: i32,
    slides_by_default: impl Fn(i32) -> bool,
) -> Result<Vec<Option<Window>>, ModelError> {
    let layer_types = config.layer_types()?;
    Ok((0..config.num_layers)
        .map(|index| {
            let sliding = match &layer_types {
                Some(kinds) => kinds[index as usize] == "sliding_attention",
                None => slides_by_default(index),
            };
            sliding.then_some(Window::Sliding(window))
        })
        .collect())
}

/// Every layer attends over all positions with the config's key/value heads.
fn full_attention_caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    attention_caches(config, vec![None; config.num_layers as usize])
}

/// Every layer attends with the config's key/value heads, layer `i` within `windows[i]`.
fn attention_caches(
    config: &ModelConfig,
    windows: Vec<Option<Window>>,
) -> Result<Vec<LayerCache>, ModelError> {
    Ok(windows
        .into_iter()
        .map(|window| LayerCache::Positions {
            shape: CacheShape::heads(config.num_kv_heads, config.head_dim),
            window: window.and_then(Window::sliding),
        })
        .collect())
}

const ARCHITECTURES: &[Architecture] = &[
    moe("deepseek_v3", deepseek_v3::build, deepseek_v3::experts)
        .caching(deepseek_v3::caches)
        .in_gguf(&["deepseek2"]),
    moe("ernie4_5_moe", ernie4_5_moe::build, ernie4_5_moe::experts).in_gguf(&["ernie4_5-moe"]),
    dense("gemma2", gemma2::build)
        .caching(gemma2::caches)
        .in_gguf(&["gemma2"]),
    dense("gemma3", gemma3_text::build).caching(gemma3_text::caches),
    dense("gemma3_text", gemma3_text::build)
        .caching(gemma3_text::caches)
        .in_gguf(&["gemma3"]),
    moe("gemma4", gemma4_text::build, gemma4_text::experts).caching(gemma4_text::caches),
    moe("gemma4_text", gemma4_text::build, gemma4_text::experts)
        .caching(gemma4_text::caches)
        .in_gguf(&["gemma4"]),
    dense("glm4", glm4::build).in_gguf(&["glm4"]),
    moe("glm4_moe", glm4_moe::build, glm4_moe::experts).in_gguf(&["glm4moe"]),
    moe("glm4_moe_lite", deepseek_v3::build, deepseek_v3::experts).caching(deepseek_v3::caches),
    moe("gpt_oss", gpt_oss::build, gpt_oss::experts)
        .caching(gpt_oss::caches)
        .in_gguf(&["gpt-oss"]),
    dense("granite", granite::build)
        .caching(llama::caches)
        .in_gguf(&["granite"]),
    moe(
        "granitemoehybrid",
        granitemoehybrid::build,
        granitemoehybrid::experts,
    )
    .caching(granitemoehybrid::caches)
    .in_gguf(&["granitehybrid"]),
    moe("kimi_k2", deepseek_v3::build, deepseek_v3::experts).caching(deepseek_v3::caches),
    moe("kimi_k25", deepseek_v3::build, deepseek_v3::experts).caching(deepseek_v3::caches),
    dense("lfm2", lfm2::build)
        .caching(lfm2::caches)
        .in_gguf(&["lfm2"]),
    moe("lfm2_moe", lfm2_moe::build, lfm2_moe::experts)
        .caching(lfm2::caches)
        .in_gguf(&["lfm2moe"]),
    dense("llama", llama::build)
        .caching(llama::caches)
        .in_gguf(&["llama", "mistral"])
        .splitting_tensors(),
    moe("llama4", llama4::build, llama4::experts).in_gguf(&["llama4"]),
    moe("llama4_text", llama4_text::build, llama4_text::experts),
    moe("minimax_m2", minimax_m2::build, minimax_m2::experts).in_gguf(&["minimax-m2"]),
    dense("ministral3", ministral3::build)
        .caching(llama::caches)
        .in_gguf(&["mistral3"]),
    dense("mistral", llama::build)
        .caching(llama::caches)
        .splitting_tensors(),
    dense("mistral3", mistral3::build).caching(llama::caches),
    moe("mixtral", mixtral::build, mixtral::experts),
    moe("nemotron_h", nemotron_h::build, nemotron_h::experts)
        .caching(nemotron_h::caches)
        .in_gguf(&["nemotron_h", "nemotron_h_moe"]),
    dense("olmo3", olmo3::build)
        .caching(llama::caches)
        .in_gguf(&["olmo2"]),
    dense("phi3", phi3::build).in_gguf(&["phi3"]),
    dense("qwen2", qwen2::build)
        .caching(llama::caches)
        .in_gguf(&["qwen2"])
        .splitting_tensors(),
    dense("qwen3", qwen3::build)
        .caching(llama::caches)
        .in_gguf(&["qwen3"])
        .splitting_tensors(),
    moe("qwen3_5", qwen3_5::build, qwen3_5::experts)
        .caching(qwen3_next::caches)
        .in_gguf(&["qwen35"])
        .splitting_tensors(),
    moe("qwen3_5_moe", qwen3_5_moe::build, qwen3_5::experts)
        .caching(qwen3_next::caches)
        .in_gguf(&["qwen35moe"])
        .splitting_tensors(),
    moe("qwen3_moe", qwen3_moe::build, qwen3_moe::experts)
        .in_gguf(&["qwen3moe"])
        .splitting_tensors(),
    moe("qwen3_next", qwen3_next::build, qwen3_next::experts)
        .caching(qwen3_next::caches)
        .in_gguf(&["qwen3next"])
        .splitting_tensors(),
    dense("seed_oss", seed_oss::build)
        .caching(llama::caches)
        .in_gguf(&["seed_oss"]),
    dense("smollm3", smollm3::build)
        .caching(llama::caches)
        .in_gguf(&["smollm3"]),
];

/// llama.cpp's `general.architecture` names this worker reads, in the rows' order.
pub fn gguf_architectures() -> impl Iterator<Item = &'static str> {
    ARCHITECTURES
        .iter()
        .flat_map(|architecture| architecture.gguf.iter().copied())
}

/// The `model_type` a GGUF file of llama.cpp's architecture `name` is read as.
pub fn model_type_of_gguf(name: &str) -> Option<&'static str> {
    ARCHITECTURES
        .iter()
        .find(|architecture| architecture.gguf.contains(&name))
        .map(|architecture| architecture.model_type)
}

fn architecture(config: &ModelConfig) -> Result<&'static Architecture, ModelError> {
    ARCHITECTURES
        .iter()
        .find(|architecture| architecture.model_type == config.model_type)
        .ok_or_else(|| ModelError::Config {
            path: config.path.clone(),
            message: format!("unsupported model_type {:?}", config.model_type),
        })
}

/// Refuses tensor parallel for an architecture with a block that does not split.
pub fn splits_tensors(config: &ModelConfig) -> Result<(), ModelError> {
    if architecture(config)?.splits_tensors {
        return Ok(());
    }
    let splitting: Vec<&str> = ARCHITECTURES
        .iter()
        .filter(|architecture| architecture.splits_tensors)
        .map(|architecture| architecture.model_type)
        .collect();
    Err(ModelError::Config {
        path: config.path.clone(),
        message: format!(
            "tensor parallel splits {}, not {}; run it as a pipeline (parallel = \"pipeline\")",
            splitting.join(", "),
            config.model_type
        ),
    })
}

/// The decoder of `config`'s architecture, its tensors taken from `weights`.
pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    (architecture(config)?.build)(config, weights)
}

/// What each layer of `config`'s architecture keeps for a sequence, from the config alone.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    (architecture(config)?.caches)(config)
}

/// The routed experts of `config`'s architecture, `None` for a dense model.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    match architecture(config)?.experts {
        Some(experts) => experts(config),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_supported_type_has_a_row() {
        let rows: Vec<&str> = super::ARCHITECTURES
            .iter()
            .map(|architecture| architecture.model_type)
            .collect();
        assert_eq!(rows, crate::model::supported::SUPPORTED);
    }

    #[test]
    fn the_readme_table_lists_exactly_the_supported_types() {
        let readme = include_str!("../../../../README.md");
        let table = readme
            .split("<!-- architectures:")
            .nth(1)
            .and_then(|rest| rest.split("<!-- end architectures -->").next())
            .expect("README.md has the architectures table");
        let mut listed: Vec<&str> = table
            .lines()
            .filter_map(|line| line.strip_prefix("| `"))
            .filter_map(|line| line.split('`').next())
            .filter(|name| *name != "model_type")
            .collect();
        listed.sort_unstable();
        let mut supported = crate::model::supported::SUPPORTED.to_vec();
        supported.sort_unstable();
        assert_eq!(listed, supported);
    }

    /// The types whose minimal config still reads differently from transformers' full one, and
    /// the keys the worker's common config or the architecture reads without transformers'
    /// default; a type leaves this list when its keys default as transformers' do.
    const STILL_DIFFERENT: &[(&str, &str)] = &[
        // transformers' `Lfm2MoeConfig` keeps `layer_types: null` (unlike `Lfm2Config`, it
        // derives nothing from `full_attn_idxs`) and its model indexes the list, as mlx-lm's
        // reads it: no reference runs without it, so neither reading of a config succeeds.
        ("lfm2_moe", "layer_types"),
    ];

    /// Every served type transformers has a config class for, read from the config.json that
    /// class writes with all its defaults and from one keeping only the keys every decoder
    /// needs (tests/data/config_defaults.json, scripts/reference/config_defaults.py): a key a
    /// release leaves out must read as transformers' default.
    #[test]
    fn an_absent_key_takes_transformers_default() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/data/config_defaults.json");
        let text = std::fs::read_to_string(&path).expect("tests/data/config_defaults.json");
        let data: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        let configs = data["configs"].as_object().expect("configs");
        let skipped = data["skipped"].as_object().expect("skipped");
        for model_type in crate::model::supported::SUPPORTED {
            assert!(
                configs.contains_key(*model_type) || skipped.contains_key(*model_type),
                "{model_type} is missing from config_defaults.json"
            );
        }
        let mut failures = Vec::new();
        let mut agreeing = Vec::new();
        for (model_type, entry) in configs {
            let before = failures.len();
            let read = |variant: &str| {
                let config = super::ModelConfig::from_json(entry[variant].clone(), &path)
                    .map_err(|error| format!("{model_type} {variant}: {error}"))?;
                let caches = super::caches(&config)
                    .map_err(|error| format!("{model_type} {variant}: {error}"))?;
                let experts = super::experts(&config)
                    .map_err(|error| format!("{model_type} {variant}: {error}"))?;
                Ok::<_, String>((caches, experts, config.rope_theta))
            };
            match (read("full"), read("minimal")) {
                (Ok((full, full_experts, full_theta)), Ok((minimal, minimal_experts, theta))) => {
                    if full_theta != theta {
                        failures.push(format!(
                            "{model_type} rope_theta: minimal {theta}, full {full_theta}"
                        ));
                    }
                    if let Some(layer) = (0..full.len().max(minimal.len()))
                        .find(|&layer| full.get(layer) != minimal.get(layer))
                    {
                        failures.push(format!(
                            "{model_type} layer {layer}: minimal {:?}, full {:?}",
                            minimal.get(layer),
                            full.get(layer)
                        ));
                    }
                    if full_experts != minimal_experts {
                        failures.push(format!(
                            "{model_type} experts: minimal {minimal_experts:?}, full {full_experts:?}"
                        ));
                    }
                }
                (full, minimal) => failures.extend(full.err().into_iter().chain(minimal.err())),
            }
            let known = STILL_DIFFERENT.iter().any(|(known, _)| known == model_type);
            if known && failures.len() == before {
                agreeing.push(model_type.as_str());
            }
            if known {
                failures.truncate(before);
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert!(
            agreeing.is_empty(),
            "{agreeing:?} now agree with transformers: drop them from STILL_DIFFERENT"
        );
    }
}
