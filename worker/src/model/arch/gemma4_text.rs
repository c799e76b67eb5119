//! Gemma 4's text model (mlx-lm's `gemma4_text.py`), standalone or inside the `gemma4` wrapper.
//! Plain RMSNorms, also over each query and key head, a weightless one over each value head, and
//! one on each block's output before its residual sum; GeGLU; attention unscaled. `layer_types`
//! mixes sliding-window layers with full ones, which have their own head size
//! (`global_head_dim`), a proportional partial rotation, and with `attention_k_eq_v` values equal
//! to their keys' projection over `num_global_key_value_heads`. The last `num_kv_shared_layers`
//! layers project no keys or values: each attends over those of the last earlier layer of its
//! type, and its MLP is twice as wide with `use_double_wide_mlp`. Each layer adds its per-layer
//! input gated by its output and multiplies its output by `layer_scalar`; with
//! `enable_moe_block`, experts run beside the MLP. The logits are soft-capped.

use std::collections::HashMap;

use crate::model::blocks::attention::{Attention, AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, DenseAndExperts, FeedForward};
use crate::model::blocks::mlp::{Activation, Mlp};
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing};
use crate::model::blocks::norm::Norm;
use crate::model::blocks::per_layer_input::{PerLayerGate, PerLayerInputs};
use crate::model::blocks::rope::Rope;
use crate::model::config::{ModelConfig, parse_rope_scaling};
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::{CacheShape, LayerCache};
use crate::model::weights::Weights;
use crate::model::window::Window;

/// One layer's attention as the config lays it out.
struct LayerAttention {
    sliding: bool,
    head_dim: i32,
    kv_heads: i32,
    values_are_keys: bool,
    /// The earlier layer whose keys and values a KV-shared layer reads.
    shared_kv: Option<usize>,
    window: Option<Window>,
}

/// Each layer's attention: sliding or full (`layer_types`, else every `sliding_window_pattern`-th
/// full), the full layers' own head size and KV heads, and the source of each KV-shared layer's
/// keys and values; also the full layers' head size, which their rotation needs.
fn attention_layout(config: &ModelConfig) -> Result<(Vec<LayerAttention>, i32), ModelError> {
    let layers = config.num_layers;
    let bad = |message: String| ModelError::Config {
        path: config.path.clone(),
        message,
    };
    let window: i32 = config.key_or("sliding_window", 512)?;
    let pattern: usize = config.key_or("sliding_window_pattern", 5)?;
    let layer_types: Vec<String> = config.key_or(
        "layer_types",
        (1..=layers as usize)
            .map(|layer| match layer % pattern.max(1) {
                0 => "full_attention".to_owned(),
                _ => "sliding_attention".to_owned(),
            })
            .collect(),
    )?;
    if layer_types.len() != layers as usize {
        return Err(bad(format!("layer_types must name {layers} layers")));
    }
    // transformers 5.23 writes the full-attention layers' head size and KV heads as overrides
    // per layer (`per_layer_config`), where earlier configs have `global_head_dim` and
    // `num_global_key_value_heads`.
    let per_layer: HashMap<String, LayerOverride> =
        config.key_or("per_layer_config", HashMap::new())?;
    let full_override = layer_types
        .iter()
        .position(|kind| kind == "full_attention")
        .and_then(|index| per_layer.get(&index.to_string()));
    let global_head_dim = match full_override.and_then(|layer| layer.head_dim) {
        Some(dim) => dim,
        None => config
            .key_or_null("global_head_dim", 512)?
            .filter(|&dim| dim > 0)
            .unwrap_or(config.head_dim),
    };
    let k_eq_v: bool = config.key_or("attention_k_eq_v", false)?;
    let global_kv_heads: Option<i32> =
        match full_override.and_then(|layer| layer.num_key_value_heads) {
            Some(heads) => Some(heads),
            None => config.key("num_global_key_value_heads")?,
        };
    let shared_layers: i32 = config.key_or("num_kv_shared_layers", 20)?;
    let first_shared = layers - shared_layers;
    let mut last_of_type = HashMap::new();
    for (index, kind) in layer_types
        .iter()
        .enumerate()
        .take(first_shared.max(0) as usize)
    {
        last_of_type.insert(kind.as_str(), index);
    }
    let attention = (0..layers)
        .map(|index| {
            let kind = layer_types[index as usize].as_str();
            let sliding = kind == "sliding_attention";
            let shared_kv = if shared_layers > 0 && index >= first_shared {
                let source = last_of_type.get(kind).ok_or_else(|| {
                    bad(format!(
                        "KV-shared layer {index} has no earlier {kind} layer"
                    ))
                })?;
                Some(*source)
            } else {
                None
            };
            let values_are_keys = k_eq_v && !sliding;
            Ok(LayerAttention {
                sliding,
                head_dim: if sliding {
                    config.head_dim
                } else {
                    global_head_dim
                },
                kv_heads: match global_kv_heads {
                    Some(heads) if values_are_keys => heads,
                    _ => config.num_kv_heads,
                },
                values_are_keys,
                shared_kv,
                window: sliding.then_some(Window::Sliding(window)),
            })
        })
        .collect::<Result<_, ModelError>>()?;
    Ok((attention, global_head_dim))
}

/// What each layer keeps for a sequence.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    let (layers, _) = attention_layout(config)?;
    Ok(layers
        .iter()
        .map(|layer| match layer.shared_kv {
            Some(_) => LayerCache::Shared,
            None => LayerCache::Positions {
                shape: CacheShape::heads(layer.kv_heads, layer.head_dim),
                window: layer.window.and_then(Window::sliding),
            },
        })
        .collect())
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let (hidden, eps, layers) = (config.hidden_size, config.rms_norm_eps, config.num_layers);
    let (attention_layers, global_head_dim) = attention_layout(config)?;
    let shared_layers: i32 = config.key_or("num_kv_shared_layers", 20)?;
    let first_shared = layers - shared_layers;
    let double_wide: bool = config.key_or("use_double_wide_mlp", true)?;
    let per_layer_width = config
        .key_or_null("hidden_size_per_layer_input", 256)?
        .unwrap_or(0);
    let moe = experts(config)?;
    let sliding_rope = rope(config, "sliding_attention", config.head_dim)?;
    let full_rope = rope(config, "full_attention", global_head_dim)?;
    let layers = (0..layers)
        .map(|index| {
            let prefix = format!("model.layers.{index}");
            let layer = &attention_layers[index as usize];
            let shared = shared_layers > 0 && index >= first_shared;
            let rope = if layer.sliding {
                &sliding_rope
            } else {
                &full_rope
            };
            let attention = AttentionSpec {
                head_dim: layer.head_dim,
                kv_heads: layer.kv_heads,
                head_norm: Some(HeadNorm::Rms { eps }),
                value_norm: Some(HeadNorm::RmsUnweighted { eps }),
                values_are_keys: layer.values_are_keys,
                shared_kv: layer.shared_kv,
                scale: 1.0,
                window: layer.window,
                ..AttentionSpec::new(config, rope.clone())
            };
            let mut norm =
                |name: &str| Norm::rms(weights, &format!("{prefix}.{name}.weight"), hidden, eps);
            let input_norm = norm("input_layernorm")?;
            let post_attention_norm = norm("post_attention_layernorm")?;
            let pre_feed_forward_norm = norm("pre_feedforward_layernorm")?;
            let post_feed_forward_norm = norm("post_feedforward_layernorm")?;
            let attention =
                Attention::load(weights, config, &format!("{prefix}.self_attn"), attention)?;
            let inner = config.intermediate_size()? * if double_wide && shared { 2 } else { 1 };
            let mlp = Mlp::load(weights, config, &format!("{prefix}.mlp"), inner, false)?
                .with_activation(Activation::GeluTanh);
            let feed_forward = match &moe {
                Some(spec) => experts_beside(weights, config, &prefix, mlp, spec.clone())?,
                None => FeedForward::Dense(mlp),
            };
            let per_layer_gate = (per_layer_width > 0)
                .then(|| PerLayerGate::load(weights, config, &prefix, per_layer_width))
                .transpose()?;
            Ok(DecoderLayer {
                input_norm,
                mixer: attention.into(),
                post_attention_norm: Some(post_attention_norm),
                pre_feed_forward_norm,
                feed_forward,
                post_feed_forward_norm: Some(post_feed_forward_norm),
                residual_scale: None,
                per_layer_gate,
                output_scale: Some(weights.take_float(&format!("{prefix}.layer_scalar"), &[1])?),
            })
        })
        .collect::<Result<_, ModelError>>()?;
    let norm = Norm::rms(weights, "model.norm.weight", hidden, eps)?;
    let tied = config.tie_word_embeddings.unwrap_or(true);
    let mut decoder = Decoder::load_around(weights, config, layers, norm, tied)?;
    decoder.embedding_scale = Some(f64::from(hidden).sqrt() as f32);
    decoder.logit_softcap = config.key_or_null("final_logit_softcapping", 30.0)?;
    if per_layer_width > 0 {
        let vocab = config.key_or("vocab_size_per_layer_input", 262_144)?;
        decoder.per_layer_inputs = Some(PerLayerInputs::load(
            weights,
            config,
            vocab,
            per_layer_width,
        )?);
    }
    Ok(decoder)
}

/// One layer's entry in transformers 5.23's `per_layer_config`.
#[derive(serde::Deserialize)]
struct LayerOverride {
    head_dim: Option<i32>,
    num_key_value_heads: Option<i32>,
}

/// The rotation of the layers of `kind` (`rope_parameters[kind]`, mlx-lm's defaults when the
/// config has none) over heads of `dims`.
fn rope(config: &ModelConfig, kind: &str, dims: i32) -> Result<Rope, ModelError> {
    let bad = |message: String| ModelError::Config {
        path: config.path.clone(),
        message: format!("rope_parameters.{kind}: {message}"),
    };
    let parameters: serde_json::Value = config
        .key("rope_parameters")?
        .and_then(|all: serde_json::Value| all.get(kind).cloned())
        .unwrap_or_else(|| match kind {
            "full_attention" => serde_json::json!({
                "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0, "rope_type": "proportional"
            }),
            _ => serde_json::json!({"rope_theta": 10_000.0, "rope_type": "default"}),
        });
    let number = |key: &str, default: f64| {
        parameters
            .get(key)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(default)
    };
    let base = number("rope_theta", 10_000.0) as f32;
    let kind_of = ["type", "rope_type"]
        .iter()
        .find_map(|key| parameters.get(key).and_then(serde_json::Value::as_str));
    let rope = match kind_of {
        Some("proportional") => {
            let rotated = (f64::from(dims) * number("partial_rotary_factor", 1.0)) as i32;
            Rope::proportional(dims, rotated, base, number("factor", 1.0) as f32)
        }
        _ => Rope::new(
            dims,
            base,
            false,
            parse_rope_scaling(&parameters, &config.raw).map_err(bad)?,
        ),
    };
    rope.map_err(|source| ModelError::Mlx {
        dir: config.path.clone(),
        action: "building rotary frequencies",
        source,
    })
}

/// The experts a config with `enable_moe_block` runs beside each layer's MLP.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    config
        .key_or("enable_moe_block", false)?
        .then(|| moe_spec(config))
        .transpose()
}

fn moe_spec(config: &ModelConfig) -> Result<MoeSpec, ModelError> {
    Ok(MoeSpec {
        activation: Activation::GeluTanh,
        // Neither transformers nor mlx-lm defaults the experts of an `enable_moe_block` model.
        ..MoeSpec::new(
            config.required("num_experts")?,
            config.required("top_k_experts")?,
            config.required("moe_intermediate_size")?,
            Routing::TopKSoftmax,
        )
    })
}

/// The experts under `{prefix}.experts` beside the layer's `mlp`, their router `{prefix}.router`.
/// The original layout's `experts.gate_up_proj` (`[experts, 2 × inner, hidden]`, gate rows
/// first) and `experts.down_proj` are split and renamed as mlx-lm's `sanitize` does.
fn experts_beside(
    weights: &mut Weights,
    config: &ModelConfig,
    prefix: &str,
    mlp: Mlp,
    spec: MoeSpec,
) -> Result<FeedForward, ModelError> {
    let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
    let experts = format!("{prefix}.experts");
    let names = ["gate_proj", "up_proj", "down_proj"]
        .map(|name| format!("{experts}.switch_glu.{name}.weight"));
    weights.convert_into(
        &format!("{experts}.gate_up_proj"),
        [&names[0], &names[1]],
        "splitting the experts' gate_up_proj",
        |fused| {
            let [gate, up] = <[_; 2]>::try_from(fused.split_equal(2, -2)?)
                .map_err(|_| mlx_rs::error::Exception::from("gate_up_proj splits in two"))?;
            Ok([gate.contiguous()?, up.contiguous()?])
        },
    )?;
    weights.rename(&format!("{experts}.down_proj"), &names[2]);
    let router = format!("{prefix}.router");
    let scales = weights.take_float(&format!("{router}.per_expert_scale"), &[spec.experts])?;
    let router_norm = Norm::rms_times(
        weights,
        &format!("{router}.scale"),
        hidden,
        eps,
        f64::from(hidden).powf(-0.5) as f32,
    )?;
    let stacked = ["gate_proj", "up_proj", "down_proj"].map(|name| ExpertNames {
        stacked: format!("{experts}.switch_glu.{name}"),
        per_expert: None,
    });
    let moe = Moe::load(weights, config, &format!("{router}.proj"), stacked, spec)?
        .with_scaled_routing(router_norm, scales);
    let mut norm = |name: &str| Norm::rms(weights, &format!("{prefix}.{name}.weight"), hidden, eps);
    Ok(FeedForward::DenseAndExperts(Box::new(DenseAndExperts {
        mlp,
        post_mlp_norm: norm("post_feedforward_layernorm_1")?,
        pre_experts_norm: norm("pre_feedforward_layernorm_2")?,
        experts: moe,
        post_experts_norm: norm("post_feedforward_layernorm_2")?,
    })))
}
