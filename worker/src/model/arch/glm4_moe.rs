//! GLM-4.5, GLM-4.6 and GLM-4.5-Air (mlx-lm's `glm4_moe.py`): attention with q/k/v biases, an
//! optional RMSNorm over each query and key head and the rotary embedding over the first
//! `partial_rotary_factor` of each head (`rope_scaling` ignored); the first
//! `first_k_dense_replace` layers dense, the others routing each position by grouped sigmoid
//! scores to `num_experts_per_tok` of `n_routed_experts` experts beside shared ones. The
//! checkpoint's multi-token-prediction layer (the one past `num_hidden_layers`), where it was
//! kept, is loaded ([`MtpLayer`]).

use serde::Deserialize;

use crate::model::blocks::attention::{AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing, unfuse_experts};
use crate::model::blocks::mtp::MtpLayer;
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// GLM-4.5's own keys, defaulting as transformers' `Glm4MoeConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    n_routed_experts: i32,
    num_experts_per_tok: i32,
    moe_intermediate_size: i32,
    n_group: i32,
    topk_group: i32,
    norm_topk_prob: bool,
    routed_scaling_factor: f32,
    /// mlx-lm's key, which transformers' class does not have.
    topk_method: String,
    attention_bias: bool,
    use_qk_norm: bool,
    first_k_dense_replace: i32,
    /// `null` or 0: none.
    n_shared_experts: Option<i32>,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            n_routed_experts: 128,
            num_experts_per_tok: 8,
            moe_intermediate_size: 1408,
            n_group: 1,
            topk_group: 1,
            norm_topk_prob: true,
            routed_scaling_factor: 1.0,
            topk_method: "noaux_tc".to_owned(),
            attention_bias: false,
            use_qk_norm: false,
            first_k_dense_replace: 1,
            n_shared_experts: Some(1),
        }
    }
}

/// The routed experts of the layers past `first_k_dense_replace`.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    Ok(Some(moe(&config.args()?)))
}

fn moe(args: &Args) -> MoeSpec {
    MoeSpec::new(
        args.n_routed_experts,
        args.num_experts_per_tok,
        args.moe_intermediate_size,
        Routing::GroupedSigmoid {
            groups: args.n_group,
            top_groups: args.topk_group,
            normalize: args.norm_topk_prob,
            scaling: args.routed_scaling_factor,
        },
    )
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    let topk_method = &args.topk_method;
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
    let attention_bias = args.attention_bias;
    let head_norm = args.use_qk_norm.then_some(HeadNorm::Rms {
        eps: config.rms_norm_eps,
    });
    let dense_layers = args.first_k_dense_replace;
    let shared_experts = args.n_shared_experts.filter(|&shared| shared > 0);
    let moe_inner = args.moe_intermediate_size;
    let moe = moe(&args);
    let load_layer = |weights: &mut Weights, index: i32, sparse: bool| {
        let attention = AttentionSpec {
            qkv_bias: attention_bias,
            head_norm,
            ..AttentionSpec::new(config, rope.clone())
        };
        DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
            let mlp = format!("{prefix}.mlp");
            if !sparse {
                return Mlp::load(weights, config, &mlp, config.intermediate_size()?, false)
                    .map(FeedForward::dense);
            }
            unfuse_experts(weights, &mlp)?;
            let names = ExpertNames::swiglu_under(&mlp);
            let mut experts =
                Moe::load(weights, config, &format!("{mlp}.gate"), names, moe.clone())?;
            if let Some(shared) = shared_experts {
                let prefix = format!("{mlp}.shared_experts");
                let inner = moe_inner * shared;
                let shared = Mlp::load(weights, config, &prefix, inner, false)?;
                experts = experts.with_shared_experts(shared);
            }
            Ok(FeedForward::experts(experts))
        })
    };
    let layers = (0..config.num_layers)
        .map(|index| load_layer(weights, index, index >= dense_layers))
        .collect::<Result<_, _>>()?;
    // The next-n layer, where the checkpoint kept it, routes to experts as DeepSeek V3's.
    let next_n = config.num_layers;
    let mtp = if weights.contains(&format!("model.layers.{next_n}.eh_proj.weight")) {
        let block = load_layer(weights, next_n, true)?;
        Some(MtpLayer::load_next_n(weights, config, next_n, block)?)
    } else {
        None
    };
    weights.discard_under(&format!("model.layers.{next_n}."));
    // mlx-lm's glm4_moe always has its own lm_head, whatever tie_word_embeddings says.
    let untied = ModelConfig {
        tie_word_embeddings: Some(false),
        ..config.clone()
    };
    Ok(Decoder::load(weights, &untied, layers)?.with_mtp(mtp))
}
