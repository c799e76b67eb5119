//! How many parameters a checkpoint's model has, and for a mixture of experts how many one token
//! runs through, from the safetensors headers and `config.json` alone (no tensor is read), so
//! `describe` can say it for every model it lists.
//!
//! Only what the worker serves counts: a wrapper's text model (not its vision tower) and the
//! decoder's `num_hidden_layers` (not a multi-token-prediction layer past them). A quantized
//! tensor counts at its unpacked size, its scales and biases not at all, so a 4-bit checkpoint
//! has as many parameters as its float original.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::arch;
use super::config::ModelConfig;
use super::error::ModelError;
use super::weights::{TensorHeader, tensor_headers};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParameterCount {
    pub total: u64,
    /// The dense parts, the shared experts and `top_k` of the routed experts; `None` for a dense
    /// model.
    pub active: Option<u64>,
    /// Whether the checkpoint holds multi-token-prediction tensors, which `total` leaves out.
    pub prediction_heads: bool,
}

/// The one architecture key the count reads itself: Gemma 4's, defaulting as transformers'
/// `Gemma4TextConfig` does.
#[derive(Deserialize, Default)]
#[serde(default)]
struct CountArgs {
    num_kv_shared_layers: i32,
}

/// The parameters of the checkpoint in `model_dir`, whose `config.json` is `config`.
pub fn count(model_dir: &Path, config: &ModelConfig) -> Result<ParameterCount, ModelError> {
    let mut tensors = tensor_headers(model_dir)?;
    if let Some(wrapper) = config.wrapper {
        tensors = tensors
            .into_iter()
            .filter_map(|(name, tensor)| Some((wrapper.text_name(&name)?, tensor)))
            .collect();
    }
    // Gemma 4's last layers read an earlier layer's keys and values; checkpoints may still carry
    // their own projections, which the loader drops.
    let first_kv_shared = config.num_layers - config.args::<CountArgs>()?.num_kv_shared_layers;
    let (mut total, mut routed) = (0u64, 0u64);
    let mut prediction_heads = false;
    for (name, tensor) in &tensors {
        let layer = layer_index(name);
        // Multi-token-prediction heads (layers past the last, or Qwen3-Next's `mtp.*`) never run.
        let prediction_head =
            name.starts_with("mtp.") || layer.is_some_and(|layer| layer >= config.num_layers);
        let shared_kv = layer.is_some_and(|layer| layer >= first_kv_shared)
            && [
                ".self_attn.k_proj.",
                ".self_attn.v_proj.",
                ".self_attn.k_norm.",
            ]
            .iter()
            .any(|part| name.contains(part));
        prediction_heads |= prediction_head;
        if prediction_head || shared_kv {
            continue;
        }
        let parameters = unpacked_elements(name, tensor, &tensors, config);
        total += parameters;
        if is_routed_expert(name) {
            routed += parameters;
        }
    }
    let active = arch::experts(config)?
        .filter(|spec| spec.experts > 0)
        .map(|spec| {
            let (top_k, experts) = (spec.top_k.max(0) as u64, spec.experts as u64);
            total - routed + routed * top_k.min(experts) / experts
        });
    Ok(ParameterCount {
        total,
        active,
        prediction_heads,
    })
}

/// The values `tensor` stands for: a packed quantized weight at its unpacked count, a quantized
/// layer's scales and biases at none.
fn unpacked_elements(
    name: &str,
    tensor: &TensorHeader,
    tensors: &HashMap<String, TensorHeader>,
    config: &ModelConfig,
) -> u64 {
    let elements = tensor.elements();
    // MLX's quantized layers: `{layer}.weight` packed into u32, `{layer}.scales`, `{layer}.biases`.
    if let Some(layer) = name
        .strip_suffix(".scales")
        .or_else(|| name.strip_suffix(".biases"))
        && tensors.contains_key(&format!("{layer}.weight"))
    {
        return 0;
    }
    if let Some(layer) = name.strip_suffix(".weight")
        && tensor.dtype == "U32"
        && tensors.contains_key(&format!("{layer}.scales"))
    {
        let bits = config
            .layer_quantization
            .get(layer)
            .or(config.quantization.as_ref())
            .map_or(32, |quantization| quantization.bits.max(1) as u64);
        return elements * 32 / bits;
    }
    // openai's MXFP4 experts: `{name}_blocks` holds two 4-bit values per byte, `{name}_scales`
    // one exponent per block.
    if name.ends_with("_blocks") {
        return elements * 2;
    }
    if let Some(stem) = name.strip_suffix("_scales")
        && tensors.contains_key(&format!("{stem}_blocks"))
    {
        return 0;
    }
    elements
}

/// `N` of a `model.layers.N.` tensor.
fn layer_index(name: &str) -> Option<i32> {
    name.strip_prefix("model.layers.")?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// A routed expert's tensor, in either layout: stacked (`switch_mlp`, gpt-oss's and Llama 4's
/// `experts.gate_proj`, Granite 4's fused `block_sparse_moe.input_linear` and `output_linear`) or
/// one per expert (`experts.7.w1`). Shared experts (`shared_experts`, `shared_expert`, Granite 4's
/// `shared_mlp`) run for every token and are not routed.
fn is_routed_expert(name: &str) -> bool {
    name.split('.')
        .any(|part| part == "experts" || part == "switch_mlp")
        || name.contains("block_sparse_moe.input_linear.")
        || name.contains("block_sparse_moe.output_linear.")
}

#[cfg(test)]
mod tests;
