//! Projections llama.cpp's converter fuses on request, split back into the ones the model reads.
//!
//! - `--fuse-qkv`: `blk.N.attn_qkv` holds the q, k and v rows one after another (its `.bias`
//!   likewise). Phi-3 reads its own `qkv_proj` fused, as its checkpoints have it, so it keeps it.
//! - `--fuse-gate-up-exps`: `blk.N.ffn_gate_up_exps` holds every expert's gate rows, then its up
//!   rows (llama.cpp's `build_moe_ffn` takes the first half as gate).
//!
//! The split is along the output rows of what the blocks became: a row's quantization scales and
//! biases are that row's, so every served type splits the same way, without a dequantization.

use mlx_rs::Array;

use super::blocks::Loaded;
use super::header::{GgufHeader, TensorInfo, Value};

/// The tensors `tensor` holds fused, each its GGUF name and rows; `None` when it is not fused.
pub fn parts(
    header: &GgufHeader,
    arch: &str,
    tensor: &TensorInfo,
) -> Result<Option<Vec<(String, u64)>>, String> {
    let Some((base, suffix @ ("weight" | "bias"))) = tensor.name.rsplit_once('.') else {
        return Ok(None);
    };
    let Some((layer, part)) = base
        .strip_prefix("blk.")
        .and_then(|rest| rest.split_once('.'))
    else {
        return Ok(None);
    };
    let names: &[&str] = match part {
        // A layer with a convolution is a hybrid's linear attention, whose `attn_qkv` is its
        // own input projection (Qwen3-Next's, Qwen3.5's).
        "attn_qkv" if arch != "phi3" && !has_convolution(header, layer) => {
            &["attn_q", "attn_k", "attn_v"]
        }
        "ffn_gate_up_exps" => &["ffn_gate_exps", "ffn_up_exps"],
        _ => return Ok(None),
    };
    let rows = rows(tensor, suffix)?;
    let sizes = if part == "attn_qkv" {
        qkv_rows(header, arch, layer)?
    } else {
        vec![rows / 2; 2]
    };
    if sizes.iter().sum::<u64>() != rows {
        return Err(format!(
            "its {rows} rows are not the {} of {}",
            sizes
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" + "),
            names.join(", ")
        ));
    }
    Ok(Some(
        names
            .iter()
            .zip(sizes)
            .map(|(name, size)| (format!("blk.{layer}.{name}.{suffix}"), size))
            .collect(),
    ))
}

fn has_convolution(header: &GgufHeader, layer: &str) -> bool {
    let name = format!("blk.{layer}.ssm_conv1d.weight");
    header.tensors.iter().any(|tensor| tensor.name == name)
}

/// The output rows of a weight (ggml's second dimension) or of a bias (its first).
fn rows(tensor: &TensorInfo, suffix: &str) -> Result<u64, String> {
    let axis = usize::from(suffix == "weight");
    tensor
        .dims
        .get(axis)
        .copied()
        .ok_or_else(|| format!("a fused {suffix} of {} dimensions", tensor.dims.len()))
}

/// Rows of q, k and v in layer `layer`, from the attention's head counts and lengths.
fn qkv_rows(header: &GgufHeader, arch: &str, layer: &str) -> Result<Vec<u64>, String> {
    let key = |name: &str| format!("{arch}.{name}");
    // Some architectures give a count per layer.
    let integer = |name: &str| -> Option<u64> {
        match header.get(&key(name))? {
            Value::Array(values) => layer
                .parse::<usize>()
                .ok()
                .and_then(|layer| values.get(layer))
                .and_then(Value::as_u64),
            value => value.as_u64(),
        }
    };
    let missing = |name: &str| format!("no {} to split it by", key(name));
    let heads = integer("attention.head_count").ok_or_else(|| missing("attention.head_count"))?;
    let heads_kv = integer("attention.head_count_kv").unwrap_or(heads);
    let hidden = integer("embedding_length").ok_or_else(|| missing("embedding_length"))?;
    let key_length = integer("attention.key_length").unwrap_or(hidden / heads.max(1));
    let value_length = integer("attention.value_length").unwrap_or(key_length);
    // Qwen3-Next's and 3.5's queries carry their output gate: two rows per query row.
    let gated = matches!(arch, "qwen3next" | "qwen35" | "qwen35moe");
    Ok(vec![
        (1 + u64::from(gated)) * heads * key_length,
        heads_kv * key_length,
        heads_kv * value_length,
    ])
}

/// `loaded` cut into `sizes` rows: a weight's arrays along their rows (MLX's second to last
/// axis), a bias along its last.
pub fn split(loaded: Loaded, sizes: &[u64], bias: bool) -> Result<Vec<Loaded>, String> {
    // Where each part but the first starts.
    let mut bounds = Vec::with_capacity(sizes.len());
    let mut end = 0;
    for size in sizes.iter().take(sizes.len().saturating_sub(1)) {
        end += size;
        bounds.push(i32::try_from(end).map_err(|_| format!("{end} rows"))?);
    }
    let axis = if bias { -1 } else { -2 };
    let cut = |array: &Array| {
        array
            .split_at_indices(&bounds, axis)
            .map_err(|error| format!("MLX failed while splitting it: {error}"))
    };
    Ok(match loaded {
        Loaded::Plain(array) => cut(&array)?.into_iter().map(Loaded::Plain).collect(),
        Loaded::Affine {
            weight,
            scales,
            biases,
            bits,
        } => cut(&weight)?
            .into_iter()
            .zip(cut(&scales)?)
            .zip(cut(&biases)?)
            .map(|((weight, scales), biases)| Loaded::Affine {
                weight,
                scales,
                biases,
                bits,
            })
            .collect(),
        Loaded::Mxfp4 { weight, scales } => cut(&weight)?
            .into_iter()
            .zip(cut(&scales)?)
            .map(|(weight, scales)| Loaded::Mxfp4 { weight, scales })
            .collect(),
    })
}
