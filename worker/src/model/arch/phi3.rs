//! Phi-3 and Phi-4-mini (mlx-lm's `phi3.py`): Llama with fused projections (`qkv_proj` and
//! `gate_up_proj`, split at load), the rotary embedding over the first `partial_rotary_factor`
//! of each head, and longrope scaling read Phi-3's way, its short factors rotating the positions
//! before the original context as transformers does (mlx-lm uses the long ones throughout; see
//! `blocks/rope.rs`).

use serde::Deserialize;

use crate::model::blocks::attention::AttentionSpec;
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::rope::Rope;
use crate::model::config::{ModelConfig, RopeScaling};
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// Phi-3's own keys, defaulting as transformers' `Phi3Config` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    original_max_position_embeddings: f64,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            original_max_position_embeddings: 4096.0,
        }
    }
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let partial: f64 = config.rope_key_or("partial_rotary_factor", 1.0)?;
    let rope_dims = (f64::from(config.head_dim) * partial) as i32;
    let rope = Rope::new(
        rope_dims,
        config.rope_theta,
        config.rope_traditional,
        scaling(config, &config.args()?),
    )
    .map_err(|source| weights.mlx_error("building rotary frequencies", source))?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let attention = AttentionSpec {
                fused_qkv: true,
                ..AttentionSpec::new(config, rope.clone())
            };
            DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
                let mlp = format!("{prefix}.mlp");
                Mlp::load_fused(weights, config, &mlp, config.intermediate_size()?)
                    .map(FeedForward::dense)
            })
        })
        .collect::<Result<_, _>>()?;
    Decoder::load(weights, config, layers)
}

/// `rope_scaling` as `phi3.py` reads it: longrope takes the context lengths from the top level of
/// config.json (both 4096 by default, as transformers' `Phi3Config` has them; mlx-lm's full length
/// is 131072); a kind other than longrope or linear is dropped with a warning there, so here too.
fn scaling(config: &ModelConfig, args: &Args) -> Option<RopeScaling> {
    match config.rope_scaling.clone() {
        Some(RopeScaling::LongRope {
            long_factor,
            short_factor,
            ..
        }) => Some(RopeScaling::LongRope {
            long_factor,
            short_factor,
            original_max_position_embeddings: Some(args.original_max_position_embeddings),
            max_position_embeddings: Some(config.max_position_embeddings as f64),
        }),
        Some(RopeScaling::Linear { factor }) => Some(RopeScaling::Linear { factor }),
        Some(other) => {
            tracing::warn!(model = %config.path.display(), scaling = ?other, "phi3 scales its rotary embedding only by longrope or linear; rotating unscaled, as mlx-lm does");
            None
        }
        None => None,
    }
}
