//! A GGUF's tensors, read from the file's blocks in Rust (`blocks/`), under the Hugging Face
//! names the model reads.
//!
//! The header has been checked before: every tensor's type is served and its data lies inside
//! the file. Each tensor is read with one positioned read, converted, and its bytes dropped, so
//! the load holds at most one tensor's file bytes beside the weights.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use mlx_rs::{Array, Dtype};

use super::blocks::{self, Choices, Loaded};
use super::fused;
use super::header::{GgufError, GgufHeader, TensorInfo};
use crate::model::{QuantMode, Quantization, Weights};

mod nemotron_h;
mod qwen3_next;

/// MLX's group size for every GGUF block type it keeps quantized.
const GROUP_SIZE: i32 = 32;

pub fn load(header: &GgufHeader, choices: Choices) -> Result<Weights, GgufError> {
    header.check_types()?;
    let arch = header.architecture().unwrap_or_default();
    let mut files: HashMap<&Path, File> = HashMap::new();
    let mut tensors = HashMap::with_capacity(header.tensors.len() * 3);
    let mut quantization = HashMap::new();
    for tensor in &header.tensors {
        // Phi-3's longrope factors and Gemma 4's proportional rotation, read into the config
        // (`config.rs`).
        if tensor.name.starts_with("rope_factors_")
            || (arch == "gemma4" && tensor.name == "rope_freqs.weight")
        {
            continue;
        }
        let failed = |message: String| {
            header.invalid(format!(
                "tensor {} ({}): {message}",
                tensor.name, tensor.ggml_type
            ))
        };
        let mut bytes =
            vec![0u8; usize::try_from(tensor.bytes).map_err(|_| failed("too large".into()))?];
        let io = |source| GgufError::Io {
            path: tensor.file.to_path_buf(),
            source,
        };
        let file = match files.entry(&tensor.file) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(File::open(&tensor.file).map_err(io)?),
        };
        file.read_exact_at(&mut bytes, tensor.start).map_err(io)?;
        let loaded = blocks::load(
            tensor.ggml_type,
            &tensor.shape(),
            &bytes,
            choices.requantize,
            tensor_scale_dtype(tensor, choices),
        )
        .map_err(failed)?;
        drop(bytes);
        match fused::parts(header, arch, tensor).map_err(failed)? {
            None => insert(arch, &tensor.name, loaded, &mut tensors, &mut quantization),
            Some(parts) => {
                let sizes: Vec<u64> = parts.iter().map(|(_, rows)| *rows).collect();
                let pieces =
                    fused::split(loaded, &sizes, tensor.name.ends_with(".bias")).map_err(failed)?;
                parts.iter().zip(pieces).try_for_each(|((name, _), piece)| {
                    insert(arch, name, piece, &mut tensors, &mut quantization)
                })
            }
        }
        .map_err(failed)?;
    }
    if qwen3_next::serves(arch) {
        qwen3_next::finish(header, arch, &mut tensors, &mut quantization)
            .map_err(|message| header.invalid(message))?;
    }
    if matches!(arch, "gemma2" | "gemma3") {
        unshift_norms(&mut tensors).map_err(|error| {
            header.invalid(format!("MLX failed while shifting {arch}'s norms: {error}"))
        })?;
    }
    // Scales converted to f16 are still pending: the model starts from evaluated arrays.
    mlx_rs::transforms::eval(tensors.values()).map_err(|error| {
        header.invalid(format!("MLX failed while converting the tensors: {error}"))
    })?;
    Ok(Weights::from_loaded(tensors, &header.path, quantization))
}

/// Files the arrays of the tensor `gguf` (its GGUF name) under their Hugging Face names:
/// `{layer}.weight`, and for a quantized one `{layer}.scales` (and `.biases`) with the layer's
/// quantization.
fn insert(
    arch: &str,
    gguf: &str,
    loaded: Loaded,
    tensors: &mut HashMap<String, Array>,
    quantization: &mut HashMap<String, Quantization>,
) -> Result<(), String> {
    if let (Some(name), Loaded::Plain(array)) = (mamba2_unsuffixed_name(arch, gguf), &loaded) {
        tensors.insert(name, array.clone());
        return Ok(());
    }
    let (base, suffix) = gguf
        .rsplit_once('.')
        .map_or((gguf, None), |(base, suffix)| (base, Some(suffix)));
    let name = |suffix: &str| format!("{}.{suffix}", hugging_face_name(arch, base));
    let (weight, scales, biases, format) = match loaded {
        Loaded::Plain(array) => {
            let key = match suffix {
                None => gguf.to_owned(),
                // Tensors mlx-lm names without a suffix, to which llama.cpp adds one.
                Some(suffix) => match hugging_face_name(arch, base) {
                    bare if [".sinks", ".layer_scalar", ".dt_bias"]
                        .iter()
                        .any(|end| bare.ends_with(end)) =>
                    {
                        bare
                    }
                    // Gemma 4's router scales: over its input, and per expert on its output.
                    router if suffix == "scale" && router.ends_with(".router.proj") => {
                        router.replace(".router.proj", ".router.scale")
                    }
                    experts if suffix == "scale" && experts.ends_with(".switch_glu.down_proj") => {
                        experts.replace(".experts.switch_glu.down_proj", ".router.per_expert_scale")
                    }
                    renamed
                        if renamed.ends_with(".e_score_correction")
                            || (has_mamba2(arch) && renamed.ends_with(".dt")) =>
                    {
                        format!("{renamed}_{suffix}")
                    }
                    _ => name(suffix),
                },
            };
            tensors.insert(key, array);
            return Ok(());
        }
        Loaded::Affine {
            weight,
            scales,
            biases,
            bits,
        } => (weight, scales, Some(biases), (bits, QuantMode::Affine)),
        Loaded::Mxfp4 { weight, scales } => (weight, scales, None, (4, QuantMode::Mxfp4)),
    };
    if suffix != Some("weight") {
        return Err("a quantized tensor that is not a layer's weight".into());
    }
    tensors.insert(name("weight"), weight);
    tensors.insert(name("scales"), scales);
    if let Some(biases) = biases {
        tensors.insert(name("biases"), biases);
    }
    quantization.insert(
        hugging_face_name(arch, base),
        Quantization {
            group_size: GROUP_SIZE,
            bits: format.0,
            mode: format.1,
        },
    );
    Ok(())
}

/// The embedding's scales set the type the whole forward pass computes in (dequantized rows and
/// matmul outputs take it). MLX's CPU backend has BLAS only for f32, and llama.cpp computes in
/// f32 too: there every legacy type's values are llama.cpp's bit for bit, and the K-quants' too
/// with `exact_k_quants` (their `d * sc` products need 17 bits, which f16 does not have). On Metal, f16 halves the bandwidth, as MLX's
/// own GGUF loader had it: values then come out rounded to f16, a relative error of 3e-4 to 5e-4
/// for every type alike (measured in `blocks/tests.rs`).
pub fn scale_dtype() -> Dtype {
    if cfg!(target_os = "macos") {
        Dtype::Float16
    } else {
        Dtype::Float32
    }
}

/// The type `tensor`'s affine scales are stored in ([`blocks::scale_dtype`]).
pub fn tensor_scale_dtype(tensor: &TensorInfo, choices: Choices) -> Dtype {
    blocks::scale_dtype(
        tensor.ggml_type,
        scale_dtype(),
        tensor.name == "token_embd.weight",
        choices.exact_k_quants,
    )
}

fn is_nemotron_h(arch: &str) -> bool {
    matches!(arch, "nemotron_h" | "nemotron_h_moe")
}

/// The families with Mamba-2 mixers, whose time-step bias `ssm_dt.bias` is `dt_bias`.
fn has_mamba2(arch: &str) -> bool {
    is_nemotron_h(arch) || arch == "granitehybrid"
}

/// The Mamba-2 tensors llama.cpp names without a `.weight` suffix, `blk.3.ssm_a` and
/// `blk.3.ssm_d` (`A = -exp(A_log)` and `D`), under the family's mixer.
fn mamba2_unsuffixed_name(arch: &str, gguf: &str) -> Option<String> {
    let (layer, part) = gguf.strip_prefix("blk.")?.split_once('.')?;
    let renamed = match part {
        "ssm_a" => "A",
        "ssm_d" => "D",
        _ => return None,
    };
    match arch {
        "nemotron_h" | "nemotron_h_moe" => Some(format!("backbone.layers.{layer}.mixer.{renamed}")),
        "granitehybrid" => Some(format!("model.layers.{layer}.mamba.{renamed}")),
        _ => None,
    }
}

/// llama.cpp's converter stores Gemma 2's and 3's norms as `1 + w` (their RMSNorm adds the one
/// at run time); the model's (1+w) norms read `w`, as Hugging Face and mlx-lm store it.
fn unshift_norms(tensors: &mut HashMap<String, Array>) -> Result<(), mlx_rs::error::Exception> {
    for (name, array) in tensors.iter_mut() {
        if name.ends_with("norm.weight") {
            *array = array.subtract(Array::from_f32(1.0))?;
        }
    }
    Ok(())
}

/// `blk.3.attn_q` → `model.layers.3.self_attn.q_proj`, with the names of `arch`
/// (`general.architecture`) where llama.cpp's and mlx-lm's layouts differ per architecture; names
/// outside the layout stay as they are (and end up in the model's warning about unused tensors).
pub fn hugging_face_name(arch: &str, gguf: &str) -> String {
    if is_nemotron_h(arch) {
        return nemotron_h::hugging_face_name(gguf).unwrap_or_else(|| gguf.to_owned());
    }
    match gguf {
        "token_embd" => return "model.embed_tokens".into(),
        "output_norm" => return "model.norm".into(),
        "output" => return "lm_head".into(),
        "per_layer_token_embd" => return "model.embed_tokens_per_layer".into(),
        "per_layer_model_proj" => return "model.per_layer_model_projection".into(),
        "per_layer_proj_norm" => return "model.per_layer_projection_norm".into(),
        // LFM2's final norm, which llama.cpp names after the embedding.
        "token_embd_norm" if matches!(arch, "lfm2" | "lfm2moe") => {
            return "model.embedding_norm".into();
        }
        _ => {}
    }
    let Some((layer, part)) = gguf
        .strip_prefix("blk.")
        .and_then(|rest| rest.split_once('.'))
    else {
        return gguf.to_owned();
    };
    if let Some(renamed) = family_layer_name(arch, part) {
        return format!("model.layers.{layer}.{renamed}");
    }
    // gpt-oss's experts and router keep openai's names in mlx-lm, Mixtral's (a `llama` with
    // experts), Llama 4's and Gemma 4's their own blocks; the others' are Qwen's.
    let (block, router, experts) = match arch {
        "gpt-oss" => ("mlp", "router", "experts"),
        "llama4" => ("feed_forward", "router", "experts"),
        "gemma4" => ("experts", "router", "switch_glu"),
        "llama" | "minimax-m2" => ("block_sparse_moe", "gate", "switch_mlp"),
        _ => ("mlp", "gate", "switch_mlp"),
    };
    let renamed = match part {
        "attn_norm" => "input_layernorm".into(),
        // Gemma 2, 3 and 4 have four norms a layer: `ffn_norm` is the one before the
        // feed-forward.
        "ffn_norm" if matches!(arch, "gemma2" | "gemma3" | "gemma4") => {
            "pre_feedforward_layernorm".into()
        }
        // GLM-4's norms on each block's output.
        "post_attention_norm" if arch == "glm4" => "post_self_attn_layernorm".into(),
        "post_ffw_norm" if arch == "glm4" => "post_mlp_layernorm".into(),
        "ffn_norm" | "post_attention_norm" => "post_attention_layernorm".into(),
        "post_ffw_norm" => "post_feedforward_layernorm".into(),
        "attn_q" => "self_attn.q_proj".into(),
        "attn_k" => "self_attn.k_proj".into(),
        "attn_v" => "self_attn.v_proj".into(),
        "attn_qkv" => "self_attn.qkv_proj".into(),
        "attn_output" => "self_attn.o_proj".into(),
        "attn_q_norm" => "self_attn.q_norm".into(),
        "attn_k_norm" => "self_attn.k_norm".into(),
        "attn_sinks" => "self_attn.sinks".into(),
        // Gemma 4's per-layer input gate, its projection and norm, and its layer scalar.
        "inp_gate" => "per_layer_input_gate".into(),
        "proj" => "per_layer_projection".into(),
        "post_norm" => "post_per_layer_input_norm".into(),
        "layer_output_scale" => "layer_scalar".into(),
        "ffn_gate" => "mlp.gate_proj".into(),
        // Phi-3's and GLM-4's fused gate and up projection is llama.cpp's `ffn_up` of twice the
        // width.
        "ffn_up" if matches!(arch, "phi3" | "glm4") => "mlp.gate_up_proj".into(),
        "ffn_up" => "mlp.up_proj".into(),
        "ffn_down" => "mlp.down_proj".into(),
        "ffn_gate_inp" if arch == "gemma4" => "router.proj".into(),
        "ffn_gate_inp" => format!("{block}.{router}"),
        "pre_ffw_norm_2" => "pre_feedforward_layernorm_2".into(),
        "post_ffw_norm_1" => "post_feedforward_layernorm_1".into(),
        "post_ffw_norm_2" => "post_feedforward_layernorm_2".into(),
        // ERNIE 4.5 keeps its correction bias in `moe_statics`, one row per expert group.
        "exp_probs_b" if arch == "ernie4_5-moe" => "mlp.moe_statics.e_score_correction".into(),
        "exp_probs_b" => format!("{block}.{router}.e_score_correction"),
        "ffn_gate_exps" => format!("{block}.{experts}.gate_proj"),
        "ffn_up_exps" => format!("{block}.{experts}.up_proj"),
        "ffn_down_exps" => format!("{block}.{experts}.down_proj"),
        "ffn_gate_shexp" => "mlp.shared_experts.gate_proj".into(),
        "ffn_up_shexp" => "mlp.shared_experts.up_proj".into(),
        "ffn_down_shexp" => "mlp.shared_experts.down_proj".into(),
        // A multi-token-prediction layer's own parts, past the trunk (its block's are a
        // layer's), under DeepSeek V3's and GLM-4.5's names.
        "nextn.eh_proj" => "eh_proj".into(),
        "nextn.enorm" => "enorm".into(),
        "nextn.hnorm" => "hnorm".into(),
        "nextn.shared_head_norm" => "shared_head.norm".into(),
        "nextn.shared_head_head" => "shared_head.head".into(),
        "nextn.embed_tokens" => "embed_tokens".into(),
        _ => return gguf.to_owned(),
    };
    // Llama 4 names each layer's MLP, experts and shared expert `feed_forward`.
    let renamed = match renamed.strip_prefix("mlp.") {
        Some(rest) if arch == "llama4" => format!(
            "feed_forward.{}",
            rest.replacen("shared_experts.", "shared_expert.", 1)
        ),
        _ => renamed,
    };
    format!("model.layers.{layer}.{renamed}")
}

/// A layer's tensor `part` in the families whose names are their own: LFM2's (`operator_norm`,
/// `conv`, `feed_forward`) and DeepSeek's latent attention, whose `attn_k_b` and `attn_v_b` (the
/// converter's split of `kv_b_proj`, the key half transposed) are already the `embed_q` and
/// `unembed_out` the model splits it into.
fn family_layer_name(arch: &str, part: &str) -> Option<&'static str> {
    Some(match (arch, part) {
        (arch, part) if qwen3_next::serves(arch) => return qwen3_next::layer_part(part),
        ("lfm2" | "lfm2moe", part) => match part {
            "attn_norm" => "operator_norm",
            "ffn_norm" => "ffn_norm",
            "shortconv.conv" => "conv.conv",
            "shortconv.in_proj" => "conv.in_proj",
            "shortconv.out_proj" => "conv.out_proj",
            "ffn_gate" => "feed_forward.gate_proj",
            "ffn_up" => "feed_forward.up_proj",
            "ffn_down" => "feed_forward.down_proj",
            "ffn_gate_inp" => "feed_forward.gate",
            "exp_probs_b" => "feed_forward.gate.e_score_correction",
            "ffn_gate_exps" => "feed_forward.switch_mlp.gate_proj",
            "ffn_up_exps" => "feed_forward.switch_mlp.up_proj",
            "ffn_down_exps" => "feed_forward.switch_mlp.down_proj",
            _ => return None,
        },
        // Granite 4: Mamba-2 mixers, and experts beside a shared MLP under Granite's names.
        ("granitehybrid", part) => match part {
            "ssm_in" => "mamba.in_proj",
            "ssm_conv1d" => "mamba.conv1d",
            "ssm_dt" => "mamba.dt",
            "ssm_norm" => "mamba.norm",
            "ssm_out" => "mamba.out_proj",
            "ffn_gate_inp" => "block_sparse_moe.router.layer",
            "ffn_gate_exps" => "block_sparse_moe.switch_mlp.gate_proj",
            "ffn_up_exps" => "block_sparse_moe.switch_mlp.up_proj",
            "ffn_down_exps" => "block_sparse_moe.switch_mlp.down_proj",
            "ffn_gate_shexp" => "shared_mlp.gate_proj",
            "ffn_up_shexp" => "shared_mlp.up_proj",
            "ffn_down_shexp" => "shared_mlp.down_proj",
            _ => return None,
        },
        ("deepseek2", part) => match part {
            "attn_q_a" => "self_attn.q_a_proj",
            "attn_q_a_norm" => "self_attn.q_a_layernorm",
            "attn_q_b" => "self_attn.q_b_proj",
            "attn_kv_a_mqa" => "self_attn.kv_a_proj_with_mqa",
            "attn_kv_a_norm" => "self_attn.kv_a_layernorm",
            "attn_kv_b" => "self_attn.kv_b_proj",
            "attn_k_b" => "self_attn.embed_q",
            "attn_v_b" => "self_attn.unembed_out",
            _ => return None,
        },
        _ => return None,
    })
}
