//! GLM-4.5, GLM-4.6 and GLM-4.5-Air (mlx-lm's `glm4_moe.py`): attention with q/k/v biases, an
//! optional RMSNorm over each query and key head and the rotary embedding over the first
//! `partial_rotary_factor` of each head (`rope_scaling` ignored); the first
//! `first_k_dense_replace` layers dense, the others routing each position by grouped sigmoid
//! scores to `num_experts_per_tok` of `n_routed_experts` experts beside shared ones. The
//! checkpoint's multi-token-prediction layer (the one past `num_hidden_layers`) is not run.

use crate::model::blocks::attention::{AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing, unfuse_experts};
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// The routed experts of the layers past `first_k_dense_replace`, `None` without
/// `n_routed_experts`.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    let Some(experts) = config.key_or("n_routed_experts", 128).map(Some)? else {
        return Ok(None);
    };
    Ok(Some(MoeSpec::new(
        experts,
        config.key_or("num_experts_per_tok", 8)?,
        config.key_or("moe_intermediate_size", 1408)?,
        Routing::GroupedSigmoid {
            groups: config.key_or("n_group", 1)?,
            top_groups: config.key_or("topk_group", 1)?,
            normalize: config.key_or("norm_topk_prob", true)?,
            scaling: config.key_or("routed_scaling_factor", 1.0)?,
        },
    )))
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let topk_method: String = config.key_or("topk_method", "noaux_tc".to_owned())?;
    if topk_method != "noaux_tc" {
        return Err(ModelError::Config {
            path: config.path.clone(),
            message: format!("unsupported topk_method {topk_method:?} (glm4_moe has noaux_tc)"),
        });
    }
    let partial: f64 = config.rope_key_or("partial_rotary_factor", 0.5)?;
    let rope_dims = (f64::from(config.head_dim) * partial) as i32;
    let rope = Rope::new(rope_dims, config.rope_theta, false, None)
        .map_err(|source| weights.mlx_error("building rotary frequencies", source))?;
    let attention_bias: bool = config.key_or("attention_bias", false)?;
    let head_norm = config
        .key_or("use_qk_norm", false)?
        .then_some(HeadNorm::Rms {
            eps: config.rms_norm_eps,
        });
    let dense_layers: i32 = config.key_or("first_k_dense_replace", 1)?;
    let shared_experts: Option<i32> = config.key("n_shared_experts")?;
    let moe_inner: i32 = config.key_or("moe_intermediate_size", 1408)?;
    let moe = experts(config)?;
    weights.discard_under(&format!("model.layers.{}.", config.num_layers));
    let layers = (0..config.num_layers)
        .map(|index| {
            let attention = AttentionSpec {
                qkv_bias: attention_bias,
                head_norm,
                ..AttentionSpec::new(config, rope.clone())
            };
            DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
                let mlp = format!("{prefix}.mlp");
                let Some(moe) = moe.clone().filter(|_| index >= dense_layers) else {
                    return Mlp::load(weights, config, &mlp, config.intermediate_size()?, false)
                        .map(FeedForward::Dense);
                };
                unfuse_experts(weights, &mlp)?;
                let names = ExpertNames::swiglu_under(&mlp);
                let mut experts = Moe::load(weights, config, &format!("{mlp}.gate"), names, moe)?;
                if let Some(shared) = shared_experts {
                    let prefix = format!("{mlp}.shared_experts");
                    let inner = moe_inner * shared;
                    let shared = Mlp::load(weights, config, &prefix, inner, false)?;
                    experts = experts.with_shared_experts(shared);
                }
                Ok(FeedForward::experts(experts))
            })
        })
        .collect::<Result<_, _>>()?;
    // mlx-lm's glm4_moe always has its own lm_head, whatever tie_word_embeddings says.
    let untied = ModelConfig {
        tie_word_embeddings: Some(false),
        ..config.clone()
    };
    Decoder::load(weights, &untied, layers)
}
