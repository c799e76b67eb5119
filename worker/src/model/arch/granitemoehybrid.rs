//! Granite 4 (mlx-lm's `granitemoehybrid.py`): IBM's hybrid of Mamba-2 mixers and attention,
//! the layers `layer_types` calls `mamba` (transformers 5: `linear_attention`) mixing with
//! Mamba-2, the others attending (without positional encoding when `position_embedding_type` is
//! `nope`, Granite 4's setting), scaled by `attention_multiplier`. Every layer's feed-forward
//! block is experts (top k, then softmax) beside an always-on shared SwiGLU MLP, or that MLP
//! alone without `num_local_experts`. Granite 3's multipliers: embedding, residual, logits.
//!
//! Checkpoints fuse each expert's gate and up projections in `block_sparse_moe.input_linear`
//! (`[experts, 2 × inner, hidden]`, gate rows first) and the shared MLP's in
//! `shared_mlp.input_linear`; the experts are split to mlx-community's stacked `switch_mlp`
//! names at load, the shared MLP's rows along its loaded blocks.

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

/// Every layer's routed experts, `None` for a dense Granite 4.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    let experts: i32 = config.key_or_null("num_local_experts", 0)?.unwrap_or(0);
    if experts == 0 {
        return Ok(None);
    }
    Ok(Some(MoeSpec::new(
        experts,
        config.key_or("num_experts_per_tok", 2)?,
        config.intermediate_size()?,
        Routing::TopKSoftmax,
    )))
}

/// A Mamba-2 layer's state or an attention layer's keys and values, per layer.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    let state = mamba_spec(config)?.state_shape();
    Ok(mamba_layers(config)?
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
    let mamba_layers = mamba_layers(config)?;
    let spec = mamba_spec(config)?;
    let moe = experts(config)?;
    let shared_inner: i32 =
        config.key_or_else("shared_intermediate_size", || config.intermediate_size())?;
    let attention_bias: bool = config.key_or("attention_bias", false)?;
    let nope = config
        .key_or_null("position_embedding_type", "rope".to_owned())?
        .is_some_and(|kind| kind == "nope");
    let rope = Rope::for_config(config, weights)?;
    let scale: f32 = config.key_or("attention_multiplier", 1.0)?;
    let attention = || AttentionSpec {
        qkv_bias: attention_bias,
        o_bias: attention_bias,
        scale,
        rope: Some(rope.clone()).filter(|_| !nope),
        ..AttentionSpec::new(config, rope.clone())
    };
    let residual_scale: f32 = config.key_or("residual_multiplier", 1.0)?;
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
    decoder.embedding_scale = Some(config.key_or("embedding_multiplier", 1.0)?);
    decoder.logit_scale = Some(1.0 / config.key_or("logits_scaling", 1.0f32)?);
    Ok(decoder)
}

/// The Mamba-2 sizes from the `mamba_*` keys; `mamba_d_head` may be `"auto"`, the mixer's
/// width (`mamba_expand × hidden`) over its heads. The time step is clipped to
/// `time_step_limit`, transformers' (0, inf) where config.json has none.
fn mamba_spec(config: &ModelConfig) -> Result<Mamba2Spec, ModelError> {
    let heads: i32 = config.key_or("mamba_n_heads", 128)?;
    let head_dim = match config.key::<serde_json::Value>("mamba_d_head")? {
        Some(serde_json::Value::Number(dim)) => {
            dim.as_i64().and_then(|dim| i32::try_from(dim).ok())
        }
        _ => None,
    };
    let head_dim = match head_dim {
        Some(dim) => dim,
        None => config.key_or::<i32>("mamba_expand", 2)? * config.hidden_size / heads.max(1),
    };
    Mamba2Spec {
        heads,
        head_dim,
        state_size: config.key_or("mamba_d_state", 256)?,
        groups: config.key_or("mamba_n_groups", 1)?,
        conv_kernel: config.key_or("mamba_d_conv", 4)?,
        conv_bias: config.key_or("mamba_conv_bias", true)?,
        proj_bias: config.key_or("mamba_proj_bias", false)?,
        time_step_limit: mamba2::time_step_limit(config, (0.0, f32::INFINITY))?,
        eps: config.rms_norm_eps,
    }
    .checked(config)
}

/// Whether each layer is a Mamba-2 one, from `layer_types`.
fn mamba_layers(config: &ModelConfig) -> Result<Vec<bool>, ModelError> {
    let bad = |message: String| ModelError::Config {
        path: config.path.clone(),
        message,
    };
    // transformers' default: every layer a Mamba-2 one.
    let types: Vec<String> = config.key_or_else("layer_types", || {
        Ok(vec!["mamba".to_owned(); config.num_layers as usize])
    })?;
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
        return Ok(FeedForward::Dense(Mlp::load(
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
        return Ok(FeedForward::Dense(shared_mlp));
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
