//! The tensors of llama.cpp's gated-DeltaNet hybrids (`qwen3next`, `qwen35`, `qwen35moe`) under
//! the names, and in the form, that mlx-lm's sanitized checkpoints have and the model reads.
//!
//! The converter (its `Qwen3NextModel`) already wrote what mlx-lm's `sanitize` makes: the
//! decoder's norms as `1 + w` (the gated `ssm_norm` as `w`), which the model then reads as plain
//! RMSNorm weights. It squeezed conv1d to `[channels, kernel]`, stored `A_log` as
//! `ssm_a = -exp(A_log)`, and split Qwen3-Next's `in_proj_qkvz` into `attn_qkv` (all q, all k,
//! all v) and `attn_gate` (z); its `in_proj_ba` stays whole as `ssm_ba`, b then a for each key
//! head's value heads. Older files keep `in_proj_qkvz` whole, as `ssm_in`.

use std::collections::HashMap;

use mlx_rs::{Array, ops};

use crate::gguf::header::GgufHeader;
use crate::model::Quantization;

/// The architectures this module names.
pub(super) fn serves(arch: &str) -> bool {
    matches!(arch, "qwen3next" | "qwen35" | "qwen35moe")
}

/// The name under a layer of llama.cpp's `part` of a layer, where it is this family's own.
pub(super) fn layer_part(part: &str) -> Option<&'static str> {
    Some(match part {
        "attn_qkv" => "linear_attn.in_proj_qkv",
        "attn_gate" => "linear_attn.in_proj_z",
        "ssm_in" => "linear_attn.in_proj_qkvz",
        "ssm_ba" => "linear_attn.in_proj_ba",
        "ssm_beta" => "linear_attn.in_proj_b",
        "ssm_alpha" => "linear_attn.in_proj_a",
        "ssm_conv1d" => "linear_attn.conv1d",
        "ssm_dt" => "linear_attn.dt_bias",
        "ssm_norm" => "linear_attn.norm",
        "ssm_out" => "linear_attn.out_proj",
        "ffn_gate_inp_shexp" => "mlp.shared_expert_gate",
        "ffn_gate_shexp" => "mlp.shared_expert.gate_proj",
        "ffn_up_shexp" => "mlp.shared_expert.up_proj",
        "ffn_down_shexp" => "mlp.shared_expert.down_proj",
        _ => return None,
    })
}

/// Turns what `weights::load` filed under the names above into what the model reads: the
/// multi-token-prediction layer under Qwen's names, `A_log`
/// from `ssm_a`, conv1d's weight as MLX's `[channels, kernel, 1]`, the shared expert's gate as
/// a one-row projection (`llama-quantize` writes it as the vector llama.cpp declares,
/// `[hidden]`), and Qwen3-Next's fused b and a split where q, k, v and z are not fused with
/// them.
pub(super) fn finish(
    header: &GgufHeader,
    arch: &str,
    tensors: &mut HashMap<String, Array>,
    quantization: &mut HashMap<String, Quantization>,
) -> Result<(), String> {
    name_prediction_layers(header, tensors, quantization);
    let names: Vec<String> = tensors.keys().cloned().collect();
    for name in names {
        let mlx = |error: mlx_rs::error::Exception| format!("MLX failed on {name}: {error}");
        if let Some(layer) = name
            .strip_prefix("blk.")
            .and_then(|rest| rest.strip_suffix(".ssm_a"))
        {
            let Some(rate) = tensors.remove(&name) else {
                continue;
            };
            let a_log = ops::log(&ops::negative(&rate).map_err(mlx)?).map_err(mlx)?;
            tensors.insert(format!("model.layers.{layer}.linear_attn.A_log"), a_log);
        } else if name.ends_with(".linear_attn.conv1d.weight")
            && let Some(conv) = tensors.get_mut(&name)
            && conv.ndim() == 2
        {
            *conv = conv.expand_dims(-1).map_err(mlx)?;
        } else if name.ends_with(".mlp.shared_expert_gate.weight")
            && let Some(gate) = tensors.get_mut(&name)
            && gate.ndim() == 1
        {
            *gate = gate.expand_dims(0).map_err(mlx)?;
        } else if let Some(prefix) = name.strip_suffix(".in_proj_ba.weight")
            && !tensors.contains_key(&format!("{prefix}.in_proj_qkvz.weight"))
        {
            split_ba(header, arch, prefix, tensors, quantization)?;
        }
    }
    Ok(())
}

/// `{prefix}.in_proj_ba` (its weight, and scales and biases if quantized) into `in_proj_b` and
/// `in_proj_a`: each key head's rows hold its value heads' b, then their a (llama.cpp's
/// `build_layer_attn_linear` views them so).
fn split_ba(
    header: &GgufHeader,
    arch: &str,
    prefix: &str,
    tensors: &mut HashMap<String, Array>,
    quantization: &mut HashMap<String, Quantization>,
) -> Result<(), String> {
    let count = |key: &str| {
        header
            .get(&format!("{arch}.{key}"))
            .and_then(|value| value.as_u64())
            .and_then(|value| i32::try_from(value).ok())
            .filter(|&value| value > 0)
            .ok_or_else(|| format!("no {arch}.{key} to split {prefix}.in_proj_ba by"))
    };
    let groups = count("ssm.group_count")?;
    let per_group = count("ssm.time_step_rank")? / groups;
    let rows = |offset: i32| {
        let rows: Vec<i32> = (0..groups)
            .flat_map(|group| (0..per_group).map(move |head| group * 2 * per_group + offset + head))
            .collect();
        Array::from_slice(&rows, &[groups * per_group])
    };
    let fused = format!("{prefix}.in_proj_ba");
    for (part, offset) in [("in_proj_b", 0), ("in_proj_a", per_group)] {
        let indices = rows(offset);
        for suffix in ["weight", "scales", "biases"] {
            if let Some(array) = tensors.get(&format!("{fused}.{suffix}")) {
                let taken = array
                    .take_axis(&indices, 0)
                    .map_err(|error| format!("MLX failed while splitting {fused}: {error}"))?;
                tensors.insert(format!("{prefix}.{part}.{suffix}"), taken);
            }
        }
        if let Some(layer) = quantization.get(&fused).copied() {
            quantization.insert(format!("{prefix}.{part}"), layer);
        }
    }
    for suffix in ["weight", "scales", "biases"] {
        tensors.remove(&format!("{fused}.{suffix}"));
    }
    quantization.remove(&fused);
    Ok(())
}

/// Files the multi-token-prediction layers the converter appends past the trunk
/// (`nextn_predict_layers` of `block_count`, renamed from the release's `mtp.*` as DeepSeek V3's
/// next-n layers are named) back under the release's names: the first one's own parts as
/// `mtp.fc` and its norms, each one's block as `mtp.layers.{i}`.
fn name_prediction_layers(
    header: &GgufHeader,
    tensors: &mut HashMap<String, Array>,
    quantization: &mut HashMap<String, Quantization>,
) {
    let Some(trunk) = header.first_prediction_layer() else {
        return;
    };
    let released = |name: &str| -> Option<String> {
        let (layer, part) = name.strip_prefix("model.layers.")?.split_once('.')?;
        let depth = layer.parse::<u64>().ok()?.checked_sub(trunk)?;
        let own = [
            ("eh_proj.", "fc."),
            ("enorm.", "pre_fc_norm_embedding."),
            ("hnorm.", "pre_fc_norm_hidden."),
            ("shared_head.norm.", "norm."),
        ];
        let renamed = own.iter().find_map(|(from, to)| {
            part.strip_prefix(from)
                .map(|rest| format!("mtp.{to}{rest}"))
        });
        Some(renamed.unwrap_or_else(|| format!("mtp.layers.{depth}.{part}")))
    };
    let names: Vec<String> = tensors.keys().cloned().collect();
    for name in names {
        if let Some(renamed) = released(&name)
            && let Some(array) = tensors.remove(&name)
        {
            tensors.insert(renamed, array);
        }
    }
    let layers: Vec<String> = quantization.keys().cloned().collect();
    for layer in layers {
        // A layer's key has no suffix: the name of one of its tensors without it.
        if let Some(renamed) = released(&format!("{layer}.weight"))
            && let Some(choice) = quantization.remove(&layer)
        {
            quantization.insert(renamed.trim_end_matches(".weight").to_owned(), choice);
        }
    }
}
