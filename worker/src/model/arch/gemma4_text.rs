//! Gemma 4's text model (mlx-lm's `gemma4_text.py`), standalone or inside the `gemma4` wrapper.
//! Plain RMSNorms, also over each query and key head, a weightless one over each value head, and
//! one on each block's output before its residual sum; GeGLU; attention unscaled. `layer_types`
//! mixes sliding-window layers with full ones, which have their own head size
//! (`global_head_dim`), a proportional partial rotation, and with `attention_k_eq_v` values equal
//! to their keys' projection over `num_global_key_value_heads`. The last `num_kv_shared_layers`
//! layers project no keys or values: each attends over those of the last earlier layer of its
//! type, and its MLP is twice as wide with `use_double_wide_mlp`. Each layer adds its per-layer
//! input gated by its output and multiplies its output by `layer_scalar`; with
//! `enable_moe_block`, experts run beside the MLP. The logits are soft-capped where
//! `final_logit_softcapping` says.

use std::collections::HashMap;

use serde::Deserialize;

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

/// Gemma 4's own keys, defaulting as transformers' `Gemma4TextConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    sliding_window: i32,
    /// transformers 5.23's full-attention overrides per layer index.
    per_layer_config: Option<HashMap<String, LayerOverride>>,
    /// Earlier configs' full-attention head size (`null` or 0: `head_dim`).
    global_head_dim: Option<i32>,
    attention_k_eq_v: bool,
    num_global_key_value_heads: Option<i32>,
    /// transformers' 0 and false (mlx-lm's 20 and true).
    num_kv_shared_layers: i32,
    use_double_wide_mlp: bool,
    /// `null`: no per-layer inputs.
    hidden_size_per_layer_input: Option<i32>,
    vocab_size_per_layer_input: i32,
    /// The token whose per-layer input an image's tokens take.
    pad_token_id: u32,
    /// transformers' `None`, no cap (mlx-lm's is 30).
    final_logit_softcapping: Option<f32>,
    enable_moe_block: bool,
    /// Neither transformers nor mlx-lm defaults the experts of an `enable_moe_block` model.
    num_experts: Option<i32>,
    top_k_experts: Option<i32>,
    moe_intermediate_size: Option<i32>,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            sliding_window: 512,
            per_layer_config: None,
            global_head_dim: Some(512),
            attention_k_eq_v: false,
            num_global_key_value_heads: None,
            num_kv_shared_layers: 0,
            use_double_wide_mlp: false,
            hidden_size_per_layer_input: Some(256),
            vocab_size_per_layer_input: 262_144,
            pad_token_id: 0,
            final_logit_softcapping: None,
            enable_moe_block: false,
            num_experts: None,
            top_k_experts: None,
            moe_intermediate_size: None,
        }
    }
}

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

/// Each layer's attention: sliding or full (`layer_types`, else as transformers'
/// `Gemma4TextConfig` lays them out: every sixth full, and the last), the full layers' own head
/// size and KV heads, and the source of each KV-shared layer's keys and values; also the full
/// layers' head size, which their rotation needs.
fn attention_layout(
    config: &ModelConfig,
    args: &Args,
) -> Result<(Vec<LayerAttention>, i32), ModelError> {
    let layers = config.num_layers;
    let bad = |message: String| ModelError::Config {
        path: config.path.clone(),
        message,
    };
    let window = args.sliding_window;
    let layer_types = config.layer_types()?.unwrap_or_else(|| {
        (1..=layers)
            .map(|layer| {
                if layer % 6 == 0 || layer == layers {
                    "full_attention".to_owned()
                } else {
                    "sliding_attention".to_owned()
                }
            })
            .collect()
    });
    // transformers 5.23 writes the full-attention layers' head size and KV heads as overrides
    // per layer (`per_layer_config`), where earlier configs have `global_head_dim` and
    // `num_global_key_value_heads`.
    let full_override = layer_types
        .iter()
        .position(|kind| kind == "full_attention")
        .zip(args.per_layer_config.as_ref())
        .and_then(|(index, per_layer)| per_layer.get(&index.to_string()));
    let global_head_dim = match full_override.and_then(|layer| layer.head_dim) {
        Some(dim) => dim,
        None => args
            .global_head_dim
            .filter(|&dim| dim > 0)
            .unwrap_or(config.head_dim),
    };
    let k_eq_v = args.attention_k_eq_v;
    let global_kv_heads = full_override
        .and_then(|layer| layer.num_key_value_heads)
        .or(args.num_global_key_value_heads);
    let shared_layers = args.num_kv_shared_layers;
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
    let (layers, _) = attention_layout(config, &config.args()?)?;
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
    let args: Args = config.args()?;
    let (attention_layers, global_head_dim) = attention_layout(config, &args)?;
    let shared_layers = args.num_kv_shared_layers;
    let first_shared = layers - shared_layers;
    let double_wide = args.use_double_wide_mlp;
    let per_layer_width = args.hidden_size_per_layer_input.unwrap_or(0);
    let moe = experts_of(config, &args)?;
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
                None => FeedForward::dense(mlp),
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
    decoder.logit_softcap = args.final_logit_softcapping;
    if per_layer_width > 0 {
        let vocab = args.vocab_size_per_layer_input;
        decoder.per_layer_inputs = Some(PerLayerInputs::load(
            weights,
            config,
            vocab,
            per_layer_width,
            args.pad_token_id,
        )?);
    }
    Ok(decoder)
}

/// One layer's entry in transformers 5.23's `per_layer_config`.
#[derive(Deserialize)]
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
    let parameters = config
        .rope_parameters_of(kind)
        .cloned()
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
    experts_of(config, &config.args()?)
}

fn experts_of(config: &ModelConfig, args: &Args) -> Result<Option<MoeSpec>, ModelError> {
    if !args.enable_moe_block {
        return Ok(None);
    }
    let (Some(experts), Some(top_k), Some(inner)) = (
        args.num_experts,
        args.top_k_experts,
        args.moe_intermediate_size,
    ) else {
        return Err(ModelError::Config {
            path: config.path.clone(),
            message: "gemma4 with enable_moe_block needs num_experts, top_k_experts and \
                      moe_intermediate_size"
                .into(),
        });
    };
    Ok(Some(MoeSpec {
        activation: Activation::GeluTanh,
        ..MoeSpec::new(experts, top_k, inner, Routing::TopKSoftmax)
    }))
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
