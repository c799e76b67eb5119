//! A GGUF's tensors through MLX's own loader, under the Hugging Face names the model reads.
//!
//! MLX turns Q4_0, Q4_1 and Q8_0 tensors into its affine format (packed `weight`, `scales`,
//! `biases`, groups of 32) and copies float tensors as they are; the header has been checked
//! before, so nothing of another type gets here.

use std::collections::HashMap;
use std::path::Path;

use mlx_rs::io::GgufFile;
use mlx_rs::{Array, Dtype};

use super::header::{GgufError, GgufHeader};
use crate::model::{QuantMode, Quantization, Weights};

/// MLX's group size for every GGUF block type it keeps quantized.
const GROUP_SIZE: i32 = 32;

pub fn load(header: &GgufHeader) -> Result<Weights, GgufError> {
    header.check_types()?;
    let failed = |action: &str, error: &dyn std::fmt::Display| {
        header.invalid(format!("MLX failed while {action}: {error}"))
    };
    let arrays = with_gguf_name(&header.path, |path| {
        GgufFile::load(path)
            .and_then(|file| file.arrays())
            .map_err(|error| failed("loading the file", &error))
    })?;
    let mut tensors = HashMap::with_capacity(arrays.len());
    for (name, array) in arrays {
        let Some((base, suffix)) = name.rsplit_once('.') else {
            tensors.insert(name, array);
            continue;
        };
        let array = match suffix {
            "scales" | "biases" => compute_precision(array)
                .map_err(|error| failed("converting quantization scales", &error))?,
            _ => array,
        };
        tensors.insert(format!("{}.{suffix}", hugging_face_name(base)), array);
    }
    mlx_rs::transforms::eval(tensors.values())
        .map_err(|error| failed("reading the tensors' data", &error))?;
    let quantization = header
        .tensors
        .iter()
        .filter_map(|tensor| {
            let bits = tensor.ggml_type.quantized_bits()?;
            let base = tensor.name.strip_suffix(".weight")?;
            Some((
                hugging_face_name(base),
                Quantization {
                    group_size: GROUP_SIZE,
                    bits,
                    mode: QuantMode::Affine,
                },
            ))
        })
        .collect();
    Ok(Weights::from_loaded(tensors, &header.path, quantization))
}

/// Runs `load` on `path`, or, when its name does not end in `.gguf` (Ollama's blobs are
/// `sha256-<hex>`), on a link to it that does: mlx-rs refuses other names.
fn with_gguf_name<T>(
    path: &Path,
    load: impl FnOnce(&Path) -> Result<T, GgufError>,
) -> Result<T, GgufError> {
    if path.extension().is_some_and(|ext| ext == "gguf") {
        return load(path);
    }
    let io = |source| GgufError::Io {
        path: path.to_path_buf(),
        source,
    };
    let target = std::fs::canonicalize(path).map_err(io)?;
    let dir = std::env::temp_dir().join(format!("corral-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io)?;
    let link = dir.join("model.gguf");
    let _ = std::fs::remove_file(&link);
    let result = std::os::unix::fs::symlink(&target, &link)
        .map_err(io)
        .and_then(|()| load(&link));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The scales' type sets the type the whole forward pass computes in (dequantized rows and
/// matmul outputs take it). MLX's CPU backend has BLAS only for f32, and llama.cpp computes in
/// f32 too; on Metal, f16 halves the bandwidth and stays as MLX loaded it.
fn compute_precision(array: Array) -> Result<Array, mlx_rs::error::Exception> {
    if cfg!(target_os = "macos") || array.dtype() == Dtype::Float32 {
        Ok(array)
    } else {
        array.as_dtype(Dtype::Float32)
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
