//! Llama 4 Scout and Maverick (mlx-lm's `llama4.py`), a vision model whose text model is served
//! alone (see [`Wrapper`](crate::model::config::Wrapper)). By layer index, not by config: three
//! of every four layers rotate (adjacent pairs, `rope_scaling`), normalize query and key heads
//! without a weight after the rotation, and attend only within their chunk of
//! `attention_chunk_size`; every fourth has no rotary embedding, attends to everything, and
//! scales its queries by the attention temperature. Every `interleave_moe_layer_step`-th layer
//! sends each position to one expert, whose input its sigmoid score scales, beside a shared
//! expert. The head is never tied.
//!
//! The original checkpoint fuses each layer's experts' gate and up projections into
//! `experts.gate_up_proj` (`[experts, hidden, 2 × inner]`) and stores `experts.down_proj`
//! transposed; both are split and transposed here as mlx-lm's `sanitize` does.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use serde::Deserialize;

use crate::model::blocks::attention::{AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::{ExpertNames, Moe, MoeSpec, Routing};
use crate::model::blocks::query_scale::QueryScale;
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;
use crate::model::window::Window;

/// Llama 4's own keys, defaulting as transformers' `Llama4TextConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    num_experts_per_tok: i32,
    num_local_experts: i32,
    attention_chunk_size: i32,
    interleave_moe_layer_step: i32,
    attention_bias: bool,
    use_qk_norm: bool,
    /// A bool, or a number as some releases write it (Python tests it for truth).
    attn_temperature_tuning: serde_json::Value,
    floor_scale: f32,
    attn_scale: f32,
    intermediate_size_mlp: i32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            num_experts_per_tok: 1,
            num_local_experts: 16,
            attention_chunk_size: 8192,
            interleave_moe_layer_step: 1,
            attention_bias: false,
            use_qk_norm: true,
            attn_temperature_tuning: true.into(),
            floor_scale: 8192.0,
            attn_scale: 0.1,
            intermediate_size_mlp: 16384,
        }
    }
}

/// The routed experts of every `interleave_moe_layer_step`-th layer.
pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    moe(config, &config.args()?).map(Some)
}

fn moe(config: &ModelConfig, args: &Args) -> Result<MoeSpec, ModelError> {
    let top_k = args.num_experts_per_tok;
    if top_k != 1 {
        return Err(ModelError::Config {
            path: config.path.clone(),
            message: format!(
                "num_experts_per_tok is {top_k}; llama4 routes each position to one expert"
            ),
        });
    }
    Ok(MoeSpec::new(
        args.num_local_experts,
        top_k,
        config.intermediate_size()?,
        Routing::TopOneSigmoidInput,
    ))
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let bad = |message: String| ModelError::Config {
        path: config.path.clone(),
        message,
    };
    let args: Args = config.args()?;
    let (chunk, moe_step) = (args.attention_chunk_size, args.interleave_moe_layer_step);
    if chunk <= 0 || moe_step <= 0 {
        return Err(bad(format!(
            "attention_chunk_size {chunk} and interleave_moe_layer_step {moe_step} must be positive"
        )));
    }
    let moe = moe(config, &args)?;
    let (attention_bias, qk_norm) = (args.attention_bias, args.use_qk_norm);
    let temperature = truthy(&args.attn_temperature_tuning).then_some(QueryScale::Temperature {
        floor_scale: args.floor_scale,
        scale: args.attn_scale,
    });
    let mlp_inner = args.intermediate_size_mlp;
    // Interleaved, from `rope_scaling` or a GGUF's `rope_freqs` factors.
    let interleaved = ModelConfig {
        rope_traditional: true,
        ..config.clone()
    };
    let rope = Rope::for_config(&interleaved, weights)?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let rotates = (index + 1) % 4 != 0;
            let attention = AttentionSpec {
                qkv_bias: attention_bias,
                o_bias: attention_bias,
                // mlx-lm's eps for these, whatever rms_norm_eps says.
                head_norm: (qk_norm && rotates).then_some(HeadNorm::RmsUnweighted { eps: 1e-6 }),
                norm_after_rope: true,
                rope: rotates.then(|| rope.clone()),
                window: rotates.then_some(Window::Chunk(chunk)),
                query_scale: temperature.filter(|_| !rotates),
                ..AttentionSpec::new(config, rope.clone())
            };
            DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
                let feed_forward = format!("{prefix}.feed_forward");
                if index % moe_step != moe_step - 1 {
                    return Mlp::load(weights, config, &feed_forward, mlp_inner, false)
                        .map(FeedForward::dense);
                }
                let experts = format!("{feed_forward}.experts");
                split_original_experts(weights, &experts)?;
                let names = ["gate_proj", "up_proj", "down_proj"].map(|name| ExpertNames {
                    stacked: format!("{experts}.{name}"),
                    per_expert: None,
                });
                let router = format!("{feed_forward}.router");
                let shared = format!("{feed_forward}.shared_expert");
                let shared =
                    Mlp::load(weights, config, &shared, config.intermediate_size()?, false)?;
                Moe::load(weights, config, &router, names, moe.clone())
                    .map(|moe| FeedForward::experts(moe.with_shared_experts(shared)))
            })
        })
        .collect::<Result<_, _>>()?;
    let untied = ModelConfig {
        tie_word_embeddings: Some(false),
        ..config.clone()
    };
    Decoder::load(weights, &untied, layers)
}

/// A config flag that may be a bool or a number (`attn_temperature_tuning`), as Python tests it.
fn truthy(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Bool(flag) => *flag,
        serde_json::Value::Number(number) => number.as_f64().is_some_and(|number| number != 0.0),
        _ => false,
    }
}

/// The original layout's `gate_up_proj` (`[experts, hidden, 2 × inner]`) and `down_proj`
/// (`[experts, inner, hidden]`) as the stacked `[experts, out, in]` projections.
fn split_original_experts(weights: &mut Weights, experts: &str) -> Result<(), ModelError> {
    let transposed = |x: &Array| -> Result<Array, Exception> { x.swap_axes(1, 2)?.contiguous() };
    let gate = format!("{experts}.gate_proj.weight");
    let up = format!("{experts}.up_proj.weight");
    weights.convert_into(
        &format!("{experts}.gate_up_proj"),
        [&gate, &up],
        "splitting the experts' gate_up_proj",
        |fused| {
            let halves = fused.split_equal(2, -1)?;
            Ok([transposed(&halves[0])?, transposed(&halves[1])?])
        },
    )?;
    let down = format!("{experts}.down_proj.weight");
    weights.convert_into(
        &format!("{experts}.down_proj"),
        [&down],
        "transposing the experts' down_proj",
        |down| Ok([transposed(down)?]),
    )
}
