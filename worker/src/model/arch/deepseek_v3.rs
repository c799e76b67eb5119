//! DeepSeek V3 and R1, Kimi K2 (`kimi_k2`, which mlx-lm maps to `deepseek_v3.py`, and
//! `kimi_k25`'s text model), and GLM-4.7-Flash
//! (`glm4_moe_lite.py`, the same model with the config's norm epsilon in its low-rank norms):
//! multi-head latent attention, whose cache holds a compressed latent per position; the first
//! `first_k_dense_replace` layers dense, then every `moe_layer_freq`-th routing each position by
//! grouped sigmoid scores (softmax where `scoring_func` says so, as llama.cpp reads a `deepseek2`
//! GGUF without a gating function) with a correction bias to `num_experts_per_tok` of
//! `n_routed_experts` experts beside shared ones. The multi-token-prediction layer past
//! `num_hidden_layers`, where the checkpoint kept it, is loaded ([`MtpLayer`]).

use serde::Deserialize;

use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward, Mixer};
use crate::model::blocks::latent_attention::{
    LatentArgs, LatentAttention, LatentDefaults, LatentSpec, latent_cache_shape,
};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing, unfuse_experts};
use crate::model::blocks::mtp::MtpLayer;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::LayerCache;
use crate::model::weights::Weights;

/// DeepSeek V3's own keys (GLM-4.7-Flash's and Kimi K2's too), defaulting as transformers'
/// `DeepseekV3Config` does; a key whose default differs by type is `None` here and takes
/// [`defaults`]' value for the type.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    /// `None` and no type default: a dense model.
    n_routed_experts: Option<i32>,
    num_experts_per_tok: Option<i32>,
    moe_intermediate_size: Option<i32>,
    n_group: Option<i32>,
    topk_group: Option<i32>,
    routed_scaling_factor: Option<f32>,
    first_k_dense_replace: Option<i32>,
    norm_topk_prob: bool,
    /// mlx-lm's keys, which transformers' class does not have.
    scoring_func: String,
    topk_method: String,
    moe_layer_freq: i32,
    /// `null` or 0: none.
    n_shared_experts: Option<i32>,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            n_routed_experts: None,
            num_experts_per_tok: None,
            moe_intermediate_size: None,
            n_group: None,
            topk_group: None,
            routed_scaling_factor: None,
            first_k_dense_replace: None,
            norm_topk_prob: true,
            scoring_func: "sigmoid".to_owned(),
            topk_method: "noaux_tc".to_owned(),
            moe_layer_freq: 1,
            n_shared_experts: Some(1),
        }
    }
}

/// The defaults of the keys whose default differs by type: transformers' config class's for
/// the type, mlx-lm's DeepSeek V3 `ModelArgs`' for kimi_k2, which transformers has no class for.
struct Defaults {
    /// `None`: a dense model (mlx-lm's).
    routed_experts: Option<i32>,
    top_k: i32,
    groups: i32,
    top_groups: i32,
    moe_inner: i32,
    scaling: f32,
    dense_layers: i32,
    latent: LatentDefaults,
}

fn defaults(config: &ModelConfig) -> Defaults {
    match config.model_type.as_str() {
        // transformers' `Glm4MoeLiteConfig` makes the first layer dense (`mlp_layer_types`).
        "glm4_moe_lite" => Defaults {
            routed_experts: Some(64),
            top_k: 4,
            groups: 1,
            top_groups: 1,
            moe_inner: 1536,
            scaling: 1.8,
            dense_layers: 1,
            latent: LatentDefaults {
                q_lora_rank: 768,
                qk_nope_head_dim: 192,
                v_head_dim: 256,
            },
        },
        "kimi_k2" => Defaults {
            routed_experts: None,
            top_k: 1,
            groups: 1,
            top_groups: 1,
            moe_inner: 1407,
            scaling: 1.0,
            dense_layers: 0,
            latent: LatentDefaults {
                q_lora_rank: 1536,
                qk_nope_head_dim: 128,
                v_head_dim: 128,
            },
        },
        _ => Defaults {
            routed_experts: Some(256),
            top_k: 8,
            groups: 8,
            top_groups: 4,
            moe_inner: 2048,
            scaling: 2.5,
            dense_layers: 3,
            latent: LatentDefaults {
                q_lora_rank: 1536,
                qk_nope_head_dim: 128,
                v_head_dim: 128,
            },
        },
    }
}

/// The routed experts of the sparse layers, `None` for a dense model.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    experts_of(config, &config.args()?)
}

fn experts_of(config: &ModelConfig, args: &Args) -> Result<Option<MoeSpec>, ModelError> {
    let defaults = defaults(config);
    let Some(experts) = args.n_routed_experts.or(defaults.routed_experts) else {
        return Ok(None);
    };
    let (groups, top_groups) = (
        args.n_group.unwrap_or(defaults.groups),
        args.topk_group.unwrap_or(defaults.top_groups),
    );
    let normalize = args.norm_topk_prob;
    let scaling = args.routed_scaling_factor.unwrap_or(defaults.scaling);
    let routing = match args.scoring_func.as_str() {
        "sigmoid" => Routing::GroupedSigmoid {
            groups,
            top_groups,
            normalize,
            scaling,
        },
        "softmax" => Routing::GroupedSoftmax {
            groups,
            top_groups,
            normalize,
            scaling,
        },
        other => {
            return Err(ModelError::Config {
                path: config.path.clone(),
                message: format!("unsupported scoring_func {other:?} (sigmoid or softmax)"),
            });
        }
    };
    Ok(Some(MoeSpec::new(
        experts,
        args.num_experts_per_tok.unwrap_or(defaults.top_k),
        args.moe_intermediate_size.unwrap_or(defaults.moe_inner),
        routing,
    )))
}

/// What each layer keeps for a sequence: its latent and shared rotary key per position.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    let latent: LatentArgs = config.args()?;
    let shape = latent_cache_shape(latent.kv_lora_rank, latent.qk_rope_head_dim);
    let layer = LayerCache::Positions {
        shape,
        window: None,
    };
    Ok(vec![layer; config.num_layers as usize])
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let latent_args: LatentArgs = config.args()?;
    let topk_method = &args.topk_method;
    if topk_method != "noaux_tc" {
        return Err(ModelError::Config {
            path: config.path.clone(),
            message: format!("unsupported topk_method {topk_method:?} (only noaux_tc)"),
        });
    }
    // DeepSeek fixes the low-rank norms' epsilon; GLM-4.7-Flash takes the model's.
    let lora_eps = if config.model_type == "glm4_moe_lite" {
        config.rms_norm_eps
    } else {
        1e-6
    };
    let defaults = defaults(config);
    let dense_layers = args.first_k_dense_replace.unwrap_or(defaults.dense_layers);
    let moe_every = args.moe_layer_freq;
    let shared_experts = args.n_shared_experts.filter(|&shared| shared > 0);
    let moe = experts_of(config, &args)?;
    let latent = defaults.latent;
    let load_layer = |weights: &mut Weights, index: i32, sparse: bool| {
        let spec = LatentSpec::from_config(config, &latent_args, lora_eps, latent)?;
        let prefix = format!("model.layers.{index}.self_attn");
        let attention = LatentAttention::load(weights, config, &prefix, spec)?;
        let mixer = Mixer::LatentAttention(Box::new(attention));
        DecoderLayer::load_around(weights, config, index, mixer, |weights, prefix| {
            let mlp = format!("{prefix}.mlp");
            let Some(moe) = moe.clone().filter(|_| sparse) else {
                return Mlp::load(weights, config, &mlp, config.intermediate_size()?, false)
                    .map(FeedForward::dense);
            };
            let inner = moe.inner;
            unfuse_experts(weights, &mlp)?;
            let names = ExpertNames::swiglu_under(&mlp);
            let mut experts = Moe::load(weights, config, &format!("{mlp}.gate"), names, moe)?;
            if let Some(shared) = shared_experts {
                let prefix = format!("{mlp}.shared_experts");
                let shared = Mlp::load(weights, config, &prefix, inner * shared, false)?;
                experts = experts.with_shared_experts(shared);
            }
            Ok(FeedForward::experts(experts))
        })
    };
    let layers = (0..config.num_layers)
        .map(|index| {
            let sparse = index >= dense_layers && moe_every > 0 && index % moe_every == 0;
            load_layer(weights, index, sparse)
        })
        .collect::<Result<_, _>>()?;
    // The next-n layer, where the checkpoint kept it, is sparse wherever the model has experts.
    let next_n = config.num_layers;
    let mtp = if weights.contains(&format!("model.layers.{next_n}.eh_proj.weight")) {
        let block = load_layer(weights, next_n, moe.is_some())?;
        Some(MtpLayer::load_next_n(weights, config, next_n, block)?)
    } else {
        None
    };
    weights.discard_under(&format!("model.layers.{next_n}."));
    // mlx-lm's model always has its own lm_head; transformers ties it where the config says so.
    let untied = ModelConfig {
        tie_word_embeddings: config.tie_word_embeddings.or(Some(false)),
        ..config.clone()
    };
    Ok(Decoder::load(weights, &untied, layers)?.with_mtp(mtp))
}
