//! Granite 4 (mlx-lm's `granitemoehybrid.py`): IBM's hybrid of Mamba-2 mixers and attention,
//! the layers `layer_types` calls `mamba` (transformers 5: `linear_attention`) mixing with
//! Mamba-2, the others attending (rotated only when `position_embedding_type` is `rope`, as in
//! transformers; Granite 4 says `nope`), scaled by `attention_multiplier`. Every layer's feed-forward
//! block is experts (top k, then softmax) beside an always-on shared SwiGLU MLP, or that MLP
//! alone without `num_local_experts`. Granite 3's multipliers: embedding, residual, logits.
//!
//! Checkpoints fuse each expert's gate and up projections in `block_sparse_moe.input_linear`
//! (`[experts, 2 × inner, hidden]`, gate rows first) and the shared MLP's in
//! `shared_mlp.input_linear`; the experts are split to mlx-community's stacked `switch_mlp`
//! names at load, the shared MLP's rows along its loaded blocks.

use serde::Deserialize;

use crate::model::blocks::attention::{Attention, AttentionSpec};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward, Mixer};
use crate::model::blocks::mamba2::{self, Mamba2, Mamba2Spec};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing};
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::{CacheShape, LayerCache};
use crate::model::weights::Weights;

/// Granite 4's own keys, defaulting as transformers' `GraniteMoeHybridConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    /// 8: experts unless the config says 0 or `null` (mlx-lm: none without the key).
    num_local_experts: Option<i32>,
    num_experts_per_tok: i32,
    /// 1024, transformers' default (corral took `intermediate_size`, as mlx-lm leaves it unset).
    shared_intermediate_size: i32,
    attention_bias: bool,
    /// transformers rotates only for `rope`; its default `None` does not (mlx-lm's: `rope`).
    position_embedding_type: Option<String>,
    attention_multiplier: f32,
    residual_multiplier: f32,
    embedding_multiplier: f32,
    logits_scaling: f32,
    mamba_n_heads: i32,
    mamba_d_head: HeadDim,
    mamba_expand: i32,
    mamba_d_state: i32,
    mamba_n_groups: i32,
    mamba_d_conv: i32,
    mamba_conv_bias: bool,
    mamba_proj_bias: bool,
    /// Every layer a Mamba-2 one without it.
    layer_types: Option<Vec<String>>,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            num_local_experts: Some(8),
            num_experts_per_tok: 2,
            shared_intermediate_size: 1024,
            attention_bias: false,
            position_embedding_type: None,
            attention_multiplier: 1.0,
            residual_multiplier: 1.0,
            embedding_multiplier: 1.0,
            logits_scaling: 1.0,
            mamba_n_heads: 128,
            mamba_d_head: HeadDim::Auto(String::from("auto")),
            mamba_expand: 2,
            mamba_d_state: 256,
            mamba_n_groups: 1,
            mamba_d_conv: 4,
            mamba_conv_bias: true,
            mamba_proj_bias: false,
            layer_types: None,
        }
    }
}

/// `mamba_d_head`: a size, or `"auto"` for the mixer's width over its heads.
#[derive(Deserialize)]
#[serde(untagged)]
enum HeadDim {
    Size(i32),
    Auto(String),
}

/// Every layer's routed experts, `None` for a dense Granite 4.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    experts_of(config, &config.args()?)
}

fn experts_of(config: &ModelConfig, args: &Args) -> Result<Option<MoeSpec>, ModelError> {
    let experts = args.num_local_experts.unwrap_or(0);
    if experts == 0 {
        return Ok(None);
    }
    Ok(Some(MoeSpec::new(
        experts,
        args.num_experts_per_tok,
        config.intermediate_size()?,
        Routing::TopKSoftmax,
    )))
}

/// A Mamba-2 layer's state or an attention layer's keys and values, per layer.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    let args: Args = config.args()?;
    let state = mamba_spec(config, &args)?.state_shape();
    Ok(mamba_layers(config, &args)?
        .into_iter()
        .map(|mamba| match mamba {
            true => LayerCache::State(state),
            false => LayerCache::Positions {
                shape: CacheShape::heads(config.num_kv_heads, config.head_dim),
                window: None,
            },
        })
        .collect())
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let mamba_layers = mamba_layers(config, &args)?;
    let spec = mamba_spec(config, &args)?;
    let moe = experts_of(config, &args)?;
    let shared_inner = args.shared_intermediate_size;
    let rotates = args.position_embedding_type.as_deref() == Some("rope");
    let rope = Rope::for_config(config, weights)?;
    let attention = || AttentionSpec {
        qkv_bias: args.attention_bias,
        o_bias: args.attention_bias,
        scale: args.attention_multiplier,
        rope: Some(rope.clone()).filter(|_| rotates),
        ..AttentionSpec::new(config, rope.clone())
    };
    let residual_scale = args.residual_multiplier;
    let layers = (0..config.num_layers)
        .map(|index| {
            let prefix = format!("model.layers.{index}");
            let mixer = if mamba_layers[index as usize] {
                let mamba = format!("{prefix}.mamba");
                Mixer::Mamba2(Box::new(Mamba2::load(weights, config, &mamba, spec)?))
            } else {
                let attention_prefix = format!("{prefix}.self_attn");
                Attention::load(weights, config, &attention_prefix, attention())?.into()
            };
            let mut layer =
                DecoderLayer::load_around(weights, config, index, mixer, |weights, prefix| {
                    feed_forward(weights, config, prefix, moe.clone(), shared_inner)
                })?;
            layer.residual_scale = Some(residual_scale);
            Ok(layer)
        })
        .collect::<Result<_, ModelError>>()?;
    let mut decoder = Decoder::load(weights, config, layers)?;
    decoder.embedding_scale = Some(args.embedding_multiplier);
    decoder.logit_scale = Some(1.0 / args.logits_scaling);
    Ok(decoder)
}

/// The Mamba-2 sizes from the `mamba_*` keys; `mamba_d_head` may be `"auto"`, the mixer's
/// width (`mamba_expand × hidden`) over its heads. The time step is clipped to
/// `time_step_limit`, transformers' (0, inf) where config.json has none.
fn mamba_spec(config: &ModelConfig, args: &Args) -> Result<Mamba2Spec, ModelError> {
    let heads = args.mamba_n_heads;
    let head_dim = match &args.mamba_d_head {
        HeadDim::Size(dim) => *dim,
        HeadDim::Auto(word) if word == "auto" => {
            args.mamba_expand * config.hidden_size / heads.max(1)
        }
        HeadDim::Auto(other) => {
            return Err(ModelError::Config {
                path: config.path.clone(),
                message: format!("mamba_d_head {other:?} is neither a size nor \"auto\""),
            });
        }
    };
    Mamba2Spec {
        heads,
        head_dim,
        state_size: args.mamba_d_state,
        groups: args.mamba_n_groups,
        conv_kernel: args.mamba_d_conv,
        conv_bias: args.mamba_conv_bias,
        proj_bias: args.mamba_proj_bias,
        time_step_limit: mamba2::time_step_limit(config, (0.0, f32::INFINITY))?,
        eps: config.rms_norm_eps,
    }
    .checked(config)
}

/// Whether each layer is a Mamba-2 one, from `layer_types`.
fn mamba_layers(config: &ModelConfig, args: &Args) -> Result<Vec<bool>, ModelError> {
    let bad = |message: String| ModelError::Config {
        path: config.path.clone(),
        message,
    };
    let types = args
        .layer_types
        .clone()
        .unwrap_or_else(|| vec!["mamba".to_owned(); config.num_layers as usize]);
    if types.len() != config.num_layers as usize {
        return Err(bad(format!(
            "layer_types names {} layers, num_hidden_layers is {}",
            types.len(),
            config.num_layers
        )));
    }
    types
        .iter()
        .map(|kind| match kind.as_str() {
            "mamba" | "linear_attention" => Ok(true),
            "attention" | "full_attention" => Ok(false),
            other => Err(bad(format!("unknown Granite 4 layer type {other:?}"))),
        })
        .collect()
}

/// The layer's experts and shared MLP (`{prefix}.block_sparse_moe`, `{prefix}.shared_mlp`), or
/// the shared MLP alone (mlx-lm renames a dense model's to `{prefix}.mlp`).
fn feed_forward(
    weights: &mut Weights,
    config: &ModelConfig,
    prefix: &str,
    moe: Option<MoeSpec>,
    shared_inner: i32,
) -> Result<FeedForward, ModelError> {
    let dense = format!("{prefix}.mlp");
    if weights.contains(&format!("{dense}.gate_proj.weight")) {
        return Ok(FeedForward::dense(Mlp::load(
            weights,
            config,
            &dense,
            shared_inner,
            false,
        )?));
    }
    let shared = format!("{prefix}.shared_mlp");
    weights.rename_layer(
        &format!("{shared}.input_linear"),
        &format!("{shared}.gate_up_proj"),
    );
    weights.rename_layer(
        &format!("{shared}.output_linear"),
        &format!("{shared}.down_proj"),
    );
    // llama.cpp's converter splits the shared MLP's fused projection.
    let shared_mlp = if weights.contains(&format!("{shared}.gate_proj.weight")) {
        Mlp::load(weights, config, &shared, shared_inner, false)?
    } else {
        Mlp::load_fused(weights, config, &shared, shared_inner)?
    };
    let Some(moe) = moe else {
        return Ok(FeedForward::dense(shared_mlp));
    };
    let block = format!("{prefix}.block_sparse_moe");
    let stacked = |name: &str| format!("{block}.switch_mlp.{name}.weight");
    weights.convert_into(
        &format!("{block}.input_linear.weight"),
        [&stacked("gate_proj"), &stacked("up_proj")],
        "splitting the experts' input_linear",
        |fused| {
            let halves = fused.split_equal(2, -2)?;
            Ok([halves[0].contiguous()?, halves[1].contiguous()?])
        },
    )?;
    weights.rename_layer(
        &format!("{block}.output_linear"),
        &format!("{block}.switch_mlp.down_proj"),
    );
    let names = ["gate_proj", "up_proj", "down_proj"].map(|name| ExpertNames {
        stacked: format!("{block}.switch_mlp.{name}"),
        per_expert: None,
    });
    let experts = Moe::load(
        weights,
        config,
        &format!("{block}.router.layer"),
        names,
        moe,
    )?;
    Ok(FeedForward::experts(
        experts.with_shared_experts(shared_mlp),
    ))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    fn read(keys: serde_json::Value) -> Result<(Option<MoeSpec>, Mamba2Spec), ModelError> {
        let mut config = json!({
            "model_type": "granitemoehybrid", "hidden_size": 64, "intermediate_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128,
            "rms_norm_eps": 1e-6, "mamba_n_heads": 4, "mamba_d_state": 16,
        });
        for (key, value) in keys.as_object().unwrap() {
            config[key] = value.clone();
        }
        let config = ModelConfig::from_json(config, Path::new("config.json"))?;
        let args: Args = config.args()?;
        Ok((experts_of(&config, &args)?, mamba_spec(&config, &args)?))
    }

    #[test]
    fn experts_and_head_size_default_as_transformers_and_null_means_dense() {
        let (experts, mamba) = read(json!({})).unwrap();
        let experts = experts.unwrap();
        assert_eq!((experts.experts, experts.top_k, experts.inner), (8, 2, 32));
        // "auto" (the default): mamba_expand × hidden over the heads.
        assert_eq!(mamba.head_dim, 2 * 64 / 4);
        assert!(
            read(json!({"num_local_experts": null}))
                .unwrap()
                .0
                .is_none()
        );
        assert!(read(json!({"num_local_experts": 0})).unwrap().0.is_none());
        let (_, sized) = read(json!({"mamba_d_head": 32, "mamba_expand": 2})).unwrap();
        assert_eq!(sized.head_dim, 32);
        let error = read(json!({"mamba_d_head": "half"})).err().unwrap();
        assert!(error.to_string().contains("mamba_d_head"), "{error}");
    }
}
