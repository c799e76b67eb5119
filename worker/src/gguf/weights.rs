//! A GGUF's tensors, read from the file's blocks in Rust (`blocks/`), under the Hugging Face
//! names the model reads.
//!
//! The header has been checked before: every tensor's type is served and its data lies inside
//! the file. Each tensor is read with one positioned read, converted, and its bytes dropped, so
//! the load holds at most one tensor's file bytes beside the weights.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use mlx_rs::{Array, Dtype};

use super::blocks::{self, Loaded, Requantize};
use super::header::{GgufError, GgufHeader, TensorInfo};
use crate::model::{QuantMode, Quantization, Weights};

/// MLX's group size for every GGUF block type it keeps quantized.
const GROUP_SIZE: i32 = 32;

pub fn load(header: &GgufHeader, requantize: Requantize) -> Result<Weights, GgufError> {
    header.check_types()?;
    let io = |source| GgufError::Io {
        path: header.path.clone(),
        source,
    };
    let file = File::open(&header.path).map_err(io)?;
    let mut tensors = HashMap::with_capacity(header.tensors.len() * 3);
    let mut quantization = HashMap::new();
    for tensor in &header.tensors {
        let failed = |message: String| {
            header.invalid(format!(
                "tensor {} ({}): {message}",
                tensor.name, tensor.ggml_type
            ))
        };
        let mut bytes =
            vec![0u8; usize::try_from(tensor.bytes).map_err(|_| failed("too large".into()))?];
        file.read_exact_at(&mut bytes, tensor.start).map_err(io)?;
        let loaded = blocks::load(
            tensor.ggml_type,
            &tensor.shape(),
            &bytes,
            requantize,
            scale_dtype(),
        )
        .map_err(failed)?;
        drop(bytes);
        insert(tensor, loaded, &mut tensors, &mut quantization).map_err(failed)?;
    }
    // Scales converted to f16 are still pending: the model starts from evaluated arrays.
    mlx_rs::transforms::eval(tensors.values()).map_err(|error| {
        header.invalid(format!("MLX failed while converting the tensors: {error}"))
    })?;
    Ok(Weights::from_loaded(tensors, &header.path, quantization))
}

/// Files the arrays of one tensor under their Hugging Face names: `{layer}.weight`, and for a
/// quantized one `{layer}.scales` (and `.biases`) with the layer's quantization.
fn insert(
    tensor: &TensorInfo,
    loaded: Loaded,
    tensors: &mut HashMap<String, Array>,
    quantization: &mut HashMap<String, Quantization>,
) -> Result<(), String> {
    let (base, suffix) = tensor
        .name
        .rsplit_once('.')
        .map_or((tensor.name.as_str(), None), |(base, suffix)| {
            (base, Some(suffix))
        });
    let name = |suffix: &str| format!("{}.{suffix}", hugging_face_name(base));
    let (weight, scales, biases, format) = match loaded {
        Loaded::Plain(array) => {
            let key = suffix.map_or_else(|| tensor.name.clone(), name);
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
        hugging_face_name(base),
        Quantization {
            group_size: GROUP_SIZE,
            bits: format.0,
            mode: format.1,
        },
    );
    Ok(())
}

/// The scales' type sets the type the whole forward pass computes in (dequantized rows and
/// matmul outputs take it). MLX's CPU backend has BLAS only for f32, and llama.cpp computes in
/// f32 too: there every exact type's values are llama.cpp's bit for bit (the K-quants' `d * sc`
/// products need 17 bits, which f16 does not have). On Metal, f16 halves the bandwidth, as MLX's
/// own GGUF loader had it: values then come out rounded to f16, a relative error of 3e-4 to 5e-4
/// for every type alike (measured in `blocks/tests.rs`).
pub fn scale_dtype() -> Dtype {
    if cfg!(target_os = "macos") {
        Dtype::Float16
    } else {
        Dtype::Float32
    }
}

/// `blk.3.attn_q` → `model.layers.3.self_attn.q_proj`; names outside the layout stay as they
/// are (and end up in the model's warning about unused tensors).
pub fn hugging_face_name(gguf: &str) -> String {
    match gguf {
        "token_embd" => return "model.embed_tokens".into(),
        "output_norm" => return "model.norm".into(),
        "output" => return "lm_head".into(),
        _ => {}
    }
    let Some((layer, part)) = gguf
        .strip_prefix("blk.")
        .and_then(|rest| rest.split_once('.'))
    else {
        return gguf.to_owned();
    };
    let renamed = match part {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return gguf.to_owned(),
    };
    format!("model.layers.{layer}.{renamed}")
}
