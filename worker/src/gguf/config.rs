//! A GGUF's hyperparameters, translated into the `config.json` keys the model already reads, so
//! both formats go through one validation.
//!
//! llama.cpp's converter permutes the q and k projections of `llama` (and Mistral and Mixtral,
//! which it writes as `llama`, Mixtral with `expert_count`), `granite`, `smollm3` and `mistral3`
//! (llamas to the converter) so that its interleaved RoPE applies; MLX's `traditional` RoPE is
//! that same rotation. DeepSeek's latent attention (`deepseek2`) rotates interleaved pairs in its
//! own layout, unpermuted. The other architectures keep Hugging Face's layout and rotate halves.
//!
//! What llama.cpp does not store, it hard-codes per architecture; so does this translation, with
//! llama.cpp's values: Qwen3-MoE normalizes its top-k weights, Gemma 3 scales queries by the
//! head size (hidden/heads for the 62-layer 27B) and slides every layer but each sixth, Gemma 2
//! scales them the same way (hidden/heads for the 46-layer 27B) and slides every even layer, as
//! gpt-oss does, SmolLM3 skips RoPE in every fourth layer, Llama 4 attends in chunks of 8192
//! (`llama4`). A layer of Qwen3-MoE without a router is dense. A family whose translation is long
//! has its own file: the gated-DeltaNet hybrids `qwen3next`, `qwen35`, `qwen35moe`
//! (`qwen3_next.rs`), LFM2 and LFM2-MoE (`lfm2.rs`: convolution layers are those without
//! key-value heads), DeepSeek V2/V3, Kimi K2 and GLM-4.7-Flash (`deepseek2.rs`: the latent
//! attention's sizes, the routing and YaRN as llama.cpp reads them), Nemotron-H
//! (`nemotron_h.rs`: the layer pattern read back from the per-layer widths), Granite 4
//! (`granite_hybrid.rs`: its Mamba-2 layers are those without key-value heads), Gemma 2 and 4
//! (`gemma.rs`), Llama 4 (`llama4.rs`), ERNIE 4.5 MoE (`ernie.rs`) and Ministral 3's rotation
//! (`ministral3.rs`).

mod deepseek2;
mod ernie;
mod gemma;
mod granite_hybrid;
mod lfm2;
mod llama4;
mod ministral3;
mod nemotron_h;
mod qwen3_next;

use serde_json::{Map, Value as Json, json};

use super::header::{GgufError, GgufHeader, Value};

/// The architectures the worker serves, as `general.architecture` names them: the rows of
/// `model/arch/`, with llama.cpp's names.
pub fn architectures() -> Vec<&'static str> {
    crate::model::gguf_architectures().collect()
}

/// The metadata of one architecture, its keys (`{arch}.…`) read by suffix.
struct Keys<'a> {
    header: &'a GgufHeader,
    arch: &'a str,
}

impl Keys<'_> {
    fn value(&self, key: &str) -> Option<&Value> {
        self.header.get(&format!("{}.{key}", self.arch))
    }

    fn integer(&self, key: &str) -> Option<u64> {
        self.value(key).and_then(Value::as_u64)
    }

    /// A number, or the first layer's of a per-layer array.
    fn first_integer(&self, key: &str) -> Option<u64> {
        let value = self.value(key)?;
        value
            .as_u64()
            .or_else(|| value.as_array()?.first()?.as_u64())
    }

    /// A per-layer array, or one number for every layer.
    fn per_layer(&self, key: &str, layers: u64) -> Option<Vec<u64>> {
        let value = self.value(key)?;
        match value.as_array() {
            Some(values) => values.iter().map(Value::as_u64).collect(),
            None => Some(vec![value.as_u64()?; layers as usize]),
        }
    }

    fn float(&self, key: &str) -> Option<f64> {
        self.value(key).and_then(Value::as_f64)
    }

    fn boolean(&self, key: &str) -> Option<bool> {
        self.value(key).and_then(Value::as_bool)
    }

    /// The number of experts, under the name `count_name` the architecture's config gives it,
    /// and how many each token uses.
    fn experts(&self, count_name: &'static str) -> Result<[(&'static str, Json); 2], GgufError> {
        Ok([
            (count_name, json!(self.required("expert_count")?)),
            (
                "num_experts_per_tok",
                json!(self.required("expert_used_count")?),
            ),
        ])
    }

    /// The expert groups routing chooses among, and how many it keeps, under transformers'
    /// names (one group of all experts where the file has none).
    fn expert_groups(&self) -> [(&'static str, Json); 2] {
        [
            (
                "n_group",
                json!(self.integer("expert_group_count").unwrap_or(1)),
            ),
            (
                "topk_group",
                json!(self.integer("expert_group_used_count").unwrap_or(1)),
            ),
        ]
    }

    /// Granite's scales of the attention, embedding, residual and logits, under transformers'
    /// names, those the file has.
    fn granite_multipliers(&self) -> Vec<(&'static str, Json)> {
        [
            ("attention.scale", "attention_multiplier"),
            ("embedding_scale", "embedding_multiplier"),
            ("residual_scale", "residual_multiplier"),
            ("logit_scale", "logits_scaling"),
        ]
        .into_iter()
        .filter_map(|(key, name)| Some((name, json!(self.float(key)?))))
        .collect()
    }

    fn missing(&self, key: &str) -> GgufError {
        self.header
            .invalid(format!("no {}.{key} in the metadata", self.arch))
    }

    fn required(&self, key: &str) -> Result<u64, GgufError> {
        self.integer(key).ok_or_else(|| self.missing(key))
    }

    fn has_tensor(&self, name: &str) -> bool {
        self.header.tensors.iter().any(|tensor| tensor.name == name)
    }
}

pub fn config_json(header: &GgufHeader) -> Result<Json, GgufError> {
    let arch = header
        .architecture()
        .ok_or_else(|| header.invalid("no general.architecture"))?;
    let Some(model_type) = crate::model::model_type_of_gguf(arch) else {
        return Err(header.invalid(format!(
            "architecture {arch:?} is not served (supported: {})",
            architectures().join(", ")
        )));
    };
    let keys = Keys { header, arch };
    let embedding = header
        .tensors
        .iter()
        .find(|tensor| tensor.name == "token_embd.weight")
        .ok_or_else(|| header.invalid("no token_embd.weight tensor"))?;
    let rows = embedding.dims.get(1).copied().unwrap_or(0);
    if matches!(arch, "nemotron_h" | "nemotron_h_moe") {
        return nemotron_h::config(&keys, rows);
    }
    let mut config = Map::new();
    // Mixtral is a `llama` with experts to llama.cpp's converter.
    let mixtral = arch == "llama" && keys.integer("expert_count").is_some_and(|count| count > 0);
    let model_type = if mixtral { "mixtral" } else { model_type };
    config.insert("model_type".into(), json!(model_type));
    let hidden = keys.required("embedding_length")?;
    config.insert("hidden_size".into(), json!(hidden));
    let feed_forward = keys
        .first_integer("feed_forward_length")
        .or_else(|| keys.integer("expert_feed_forward_length"))
        .ok_or_else(|| keys.missing("feed_forward_length"))?;
    config.insert("intermediate_size".into(), json!(feed_forward));
    let layers = keys.required("block_count")?;
    config.insert("num_hidden_layers".into(), json!(layers));
    let heads = keys.required("attention.head_count")?;
    config.insert("num_attention_heads".into(), json!(heads));
    config.insert(
        "num_key_value_heads".into(),
        json!(
            keys.first_integer("attention.head_count_kv")
                .unwrap_or(heads)
        ),
    );
    // Always written: llama.cpp's default (hidden / heads) is not every transformers class's.
    let head_dim = keys
        .integer("attention.key_length")
        .unwrap_or(hidden / heads.max(1));
    config.insert("head_dim".into(), json!(head_dim));
    // The table's rows, not the tokenizer's length: converters pad the embedding.
    config.insert(
        "vocab_size".into(),
        json!(embedding.dims.get(1).copied().unwrap_or(0)),
    );
    config.insert(
        "rms_norm_eps".into(),
        json!(
            keys.float("attention.layer_norm_rms_epsilon")
                .ok_or_else(|| keys.missing("attention.layer_norm_rms_epsilon"))?
        ),
    );
    if let Some(theta) = keys.float("rope.freq_base") {
        config.insert("rope_theta".into(), json!(theta));
    }
    config.insert(
        "rope_traditional".into(),
        json!(matches!(
            model_type,
            "llama" | "granite" | "granitemoehybrid" | "mixtral" | "smollm3" | "ministral3"
        )),
    );
    if let Some(context) = keys.integer("context_length") {
        config.insert("max_position_embeddings".into(), json!(context));
    }
    if let Some(scaling) = rope_scaling(&keys)? {
        config.insert("rope_scaling".into(), scaling);
    }
    config.insert(
        "tie_word_embeddings".into(),
        json!(!keys.has_tensor("output.weight")),
    );
    config.insert(
        "attention_bias".into(),
        json!(keys.has_tensor("blk.0.attn_q.bias") || keys.has_tensor("blk.0.attn_qkv.bias")),
    );
    let mut put = |key: &str, value: Json| {
        config.insert(key.into(), value);
    };
    match arch {
        "qwen3moe" => {
            for (key, value) in keys.experts("num_experts")? {
                put(key, value);
            }
            put(
                "moe_intermediate_size",
                json!(
                    keys.integer("expert_feed_forward_length")
                        .unwrap_or(feed_forward)
                ),
            );
            put(
                "norm_topk_prob",
                json!(keys.boolean("expert_weights_norm").unwrap_or(true)),
            );
            let dense: Vec<u64> = (0..layers)
                .filter(|layer| !keys.has_tensor(&format!("blk.{layer}.ffn_gate_inp.weight")))
                .collect();
            put("mlp_only_layers", json!(dense));
        }
        "gemma3" => {
            put("head_dim", json!(head_dim));
            let window = keys.integer("attention.sliding_window").unwrap_or(0);
            put("sliding_window", json!(window));
            let pattern = if window == 0 {
                1
            } else {
                sliding_pattern(&keys, 6)?
            };
            put("sliding_window_pattern", json!(pattern));
            put(
                "rope_local_base_freq",
                json!(keys.float("rope.freq_base_swa").unwrap_or(10_000.0)),
            );
            let scalar = if layers == 62 {
                hidden / heads
            } else {
                head_dim
            };
            put("query_pre_attn_scalar", json!(scalar));
        }
        "llama" if mixtral => {
            for (key, value) in keys.experts("num_local_experts")? {
                put(key, value);
            }
        }
        "gemma2" => gemma::gemma2(&keys, &mut config, layers, heads, head_dim)?,
        "gemma4" => gemma::gemma4(&keys, &mut config, layers, feed_forward)?,
        "qwen3next" | "qwen35" | "qwen35moe" => {
            return qwen3_next::hybrid(&keys, config, layers, head_dim);
        }
        "llama4" => llama4::llama4(&keys, &mut config, feed_forward)?,
        "mistral3" => {
            let theta = keys.float("rope.freq_base").unwrap_or(1_000_000.0);
            let context = keys.integer("context_length").unwrap_or(0);
            put(
                "rope_parameters",
                ministral3::ministral3_rope(&keys, theta, context)?,
            );
        }
        "olmo2" => {
            if let Some(window) = keys.integer("attention.sliding_window") {
                put("sliding_window", json!(window));
                put("layer_types", json!(layer_kinds(&keys, layers)?));
            }
        }
        // Seed-OSS's output projection has a bias of its own, apart from q, k and v's.
        "seed_oss" => put(
            "attention_out_bias",
            json!(keys.has_tensor("blk.0.attn_output.bias")),
        ),
        "ernie4_5-moe" => ernie::ernie4_5_moe(&keys, &mut config)?,
        "lfm2" | "lfm2moe" => lfm2::lfm2(&keys, &mut config, layers)?,
        "granitehybrid" => granite_hybrid::granite_hybrid(&keys, &mut config, layers)?,
        "deepseek2" => deepseek2::deepseek2(&keys, &mut config, layers)?,
        "minimax-m2" => {
            if let Some(gating) = keys.integer("expert_gating_func")
                && gating != 2
            {
                return Err(header.invalid(format!(
                    "minimax-m2.expert_gating_func {gating}: MiniMax-M2 routes by sigmoid (2)"
                )));
            }
            for (key, value) in keys.experts("num_local_experts")? {
                put(key, value);
            }
            put(
                "intermediate_size",
                json!(keys.required("expert_feed_forward_length")?),
            );
            put("rotary_dim", json!(keys.required("rope.dimension_count")?));
        }
        // llama.cpp stores no NoPE layers: every fourth, hard-coded.
        "smollm3" => put("no_rope_layer_interval", json!(4)),
        "gpt-oss" => {
            for (key, value) in keys.experts("num_local_experts")? {
                put(key, value);
            }
            if let Some(inner) = keys.integer("expert_feed_forward_length") {
                put("intermediate_size", json!(inner));
            }
            put(
                "sliding_window",
                json!(keys.required("attention.sliding_window")?),
            );
            put(
                "layer_types",
                json!(periodic_kinds(layers, sliding_pattern(&keys, 2)?)),
            );
        }
        "glm4moe" => {
            if let Some(gating) = keys.integer("expert_gating_func")
                && gating != 2
            {
                return Err(header.invalid(format!(
                    "glm4moe.expert_gating_func {gating}: GLM-4.5 routes by sigmoid (2)"
                )));
            }
            let nextn = keys.integer("nextn_predict_layers").unwrap_or(0);
            put("num_hidden_layers", json!(layers.saturating_sub(nextn)));
            for (key, value) in keys.experts("n_routed_experts")? {
                put(key, value);
            }
            put(
                "moe_intermediate_size",
                json!(
                    keys.integer("expert_feed_forward_length")
                        .unwrap_or(feed_forward)
                ),
            );
            put(
                "n_shared_experts",
                json!(keys.integer("expert_shared_count").unwrap_or(0)),
            );
            put(
                "first_k_dense_replace",
                json!(keys.integer("leading_dense_block_count").unwrap_or(0)),
            );
            put(
                "routed_scaling_factor",
                json!(keys.float("expert_weights_scale").unwrap_or(1.0)),
            );
            put(
                "norm_topk_prob",
                json!(keys.boolean("expert_weights_norm").unwrap_or(true)),
            );
            for (key, value) in keys.expert_groups() {
                put(key, value);
            }
            put(
                "partial_rotary_factor",
                json!(rotary_fraction(&keys, head_dim)),
            );
            put(
                "use_qk_norm",
                json!(keys.has_tensor("blk.0.attn_q_norm.weight")),
            );
        }
        // GLM-4's rotation of part of each head, in adjacent pairs as Hugging Face's.
        "glm4" => put(
            "partial_rotary_factor",
            json!(rotary_fraction(&keys, head_dim)),
        ),
        "phi3" => {
            put(
                "partial_rotary_factor",
                json!(rotary_fraction(&keys, head_dim)),
            );
            if let Some(original) = keys.integer("rope.scaling.original_context_length") {
                put("original_max_position_embeddings", json!(original));
            }
        }
        "granite" => {
            for (name, value) in keys.granite_multipliers() {
                put(name, value);
            }
        }
        _ => {}
    }
    if arch == "llama4" {
        // mlx-lm's Llama 4 is the text model of its multimodal wrapper.
        return Ok(json!({"model_type": "llama4", "text_config": config}));
    }
    Ok(Json::Object(config))
}

/// `rope.dimension_count` as a fraction of the head (all of it when absent).
fn rotary_fraction(keys: &Keys, head_dim: u64) -> f64 {
    keys.integer("rope.dimension_count")
        .map_or(1.0, |dims| dims as f64 / head_dim.max(1) as f64)
}

/// Each layer's kind from `attention.sliding_window_pattern` as llama.cpp's converter writes it
/// one flag per layer (true: sliding), for Gemma 4 and OLMo 3.
fn layer_kinds(keys: &Keys, layers: u64) -> Result<Vec<&'static str>, GgufError> {
    let flags: Vec<bool> = keys
        .value("attention.sliding_window_pattern")
        .and_then(Value::as_array)
        .and_then(|values| values.iter().map(Value::as_bool).collect())
        .filter(|flags: &Vec<bool>| flags.len() as u64 == layers)
        .ok_or_else(|| {
            keys.header.invalid(format!(
                "{}.attention.sliding_window_pattern must flag every layer",
                keys.arch
            ))
        })?;
    Ok(flags
        .iter()
        .map(|&sliding| {
            if sliding {
                "sliding_attention"
            } else {
                "full_attention"
            }
        })
        .collect())
}

/// Each of `layers` layers' kind when every `pattern`-th attends globally and the others slide.
fn periodic_kinds(layers: u64, pattern: u64) -> Vec<&'static str> {
    (0..layers)
        .map(|layer| {
            if (layer + 1) % pattern == 0 {
                "full_attention"
            } else {
                "sliding_attention"
            }
        })
        .collect()
}

/// Every how many layers one attends globally: `attention.sliding_window_pattern` as a number,
/// or as llama.cpp's per-layer flags (true for sliding) when they repeat with a period ending in
/// the one global layer; `default` (llama.cpp's value for the architecture) without it.
fn sliding_pattern(keys: &Keys, default: u64) -> Result<u64, GgufError> {
    let Some(value) = keys.value("attention.sliding_window_pattern") else {
        return Ok(default);
    };
    if let Some(period) = value.as_u64() {
        return Ok(period.max(1));
    }
    let flags: Option<Vec<bool>> = value
        .as_array()
        .map(|values| values.iter().map(Value::as_bool).collect())
        .and_then(|flags| flags);
    let unsupported = || {
        keys.header.invalid(format!(
            "{}.attention.sliding_window_pattern {value:?} is not a repeating period of sliding \
             layers ending in a global one",
            keys.arch
        ))
    };
    let flags = flags.ok_or_else(unsupported)?;
    let period = flags
        .iter()
        .position(|&sliding| !sliding)
        .ok_or_else(unsupported)?
        + 1;
    let periodic = flags
        .iter()
        .enumerate()
        .all(|(layer, &sliding)| sliding == ((layer + 1) % period != 0));
    if periodic {
        Ok(period as u64)
    } else {
        Err(unsupported())
    }
}

/// The architectures whose YaRN betas llama.cpp reads from `rope.scaling.yarn_beta_*`.
const YARN_BETAS_READ: &[&str] = &["mistral3"];

/// `rope_scaling` from `rope.scaling.*`; Phi-3's longrope factors are tensors
/// (`rope_factors_long`, `rope_factors_short`) in the file.
fn rope_scaling(keys: &Keys) -> Result<Option<Json>, GgufError> {
    let factor = || {
        keys.float("rope.scaling.factor")
            .ok_or_else(|| keys.missing("rope.scaling.factor"))
    };
    let kind = keys.value("rope.scaling.type").and_then(Value::as_str);
    let has_long_factors = keys.has_tensor("rope_factors_long.weight");
    Ok(match kind {
        None | Some("none") if !has_long_factors => None,
        Some("linear") => Some(json!({"type": "linear", "factor": factor()?})),
        Some("yarn") => {
            let mut yarn = json!({
                "type": "yarn",
                "factor": factor()?,
                "original_max_position_embeddings": keys
                    .integer("rope.scaling.original_context_length")
                    .ok_or_else(|| keys.missing("rope.scaling.original_context_length"))?,
            });
            // llama.cpp reads YaRN's betas from the file for these alone; the others rotate
            // with its defaults (32 and 1) whatever the file says (Kimi K2's DeepSeek: 1 and 1).
            if YARN_BETAS_READ.contains(&keys.arch) {
                for (key, name) in [
                    ("rope.scaling.yarn_beta_fast", "beta_fast"),
                    ("rope.scaling.yarn_beta_slow", "beta_slow"),
                ] {
                    if let Some(value) = keys.float(key) {
                        yarn[name] = json!(value);
                    }
                }
            }
            Some(yarn)
        }
        None | Some("none" | "longrope") => {
            let read = |name: &str| {
                keys.header
                    .read_f32(name)?
                    .ok_or_else(|| keys.header.invalid(format!("longrope without {name}")))
            };
            // llama.cpp rotates every position with one set, chosen by the context it is given:
            // the long factors past the original context. corral serves a GGUF at its whole
            // context (`context_length`), so with those; `rope_factors_short` stays unread.
            Some(json!({
                "type": "longrope",
                "long_factor": read("rope_factors_long.weight")?,
            }))
        }
        Some(other) => {
            return Err(keys.header.invalid(format!(
                "rope scaling {other:?} is not served (supported: none, linear, yarn, longrope)"
            )));
        }
    })
}
