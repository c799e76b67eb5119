//! What a model will hold once loaded, estimated from its directory before any worker starts, so
//! admission can refuse or make room first: the safetensors files' sizes (the weights are loaded
//! as stored) plus a KV cache reserve computed from `config.json`; a GGUF file counts its size,
//! which the worker's description replaces with what its weights take once loaded (see
//! `process/workers.rs`), plus the worker process's own base.

use std::fs;
use std::io;
use std::path::Path;

use serde::Deserialize;

/// Tokens of KV cache reserved per model. A worker's cache grows with its context, so the real
/// amount is unknown at load time; 4096 tokens covers a typical chat exchange without reserving a
/// long context's worth that most requests never use. The footprint samples and the watermarks
/// catch what grows past it.
pub const KV_RESERVE_TOKENS: u64 = 4096;

/// What a worker process holds besides its weights: its code and libraries (MLX, BLAS), the
/// tokenizer, MLX's buffers, thread stacks, and after a first request its KV cache's first steps.
/// Measured on Linux as the footprint minus the weights (`scripts/gguf_memory.sh`): SmolLM2-135M
/// (Q4_K_M, Q5_K_M, Q6_K; a 49152-token vocabulary) 39 MiB once loaded and 58 MiB after one chat;
/// a random-weight 197M llama (Q4_K_M, 4096 tokens) 23 and 49 MiB. With the 5% on the weights,
/// 40 MiB puts every one of them within 8% of its footprint after a chat.
pub const PROCESS_BASE_BYTES: u64 = 40 << 20;

/// A model's expected memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelEstimate {
    /// The sum of the `*.safetensors` files' sizes (a GGUF's loaded size, when described).
    pub weight_bytes: u64,
    /// Keys and values for `KV_RESERVE_TOKENS` tokens across the attention layers, plus one
    /// sequence's state in the recurrent ones.
    pub kv_reserve_bytes: u64,
    /// The worker process's own memory, [`PROCESS_BASE_BYTES`], for a GGUF, whose KV reserve
    /// cannot be counted; a directory's KV reserve already covers it (a 4096-token cache is
    /// larger than the base for any model but the test fixtures).
    pub base_bytes: u64,
}

impl ModelEstimate {
    /// Weights plus 5% (allocator slack, runtime buffers), plus the KV reserve and the base.
    pub fn total(&self) -> u64 {
        let weights = u128::from(self.weight_bytes) * 105 / 100;
        u64::try_from(weights)
            .unwrap_or(u64::MAX)
            .saturating_add(self.kv_reserve_bytes)
            .saturating_add(self.base_bytes)
    }
}

/// The fields of `config.json` the KV cache's size depends on.
#[derive(Debug, Deserialize)]
struct AttentionConfig {
    /// Nemotron-H's may leave it out: its layer list has one entry per layer.
    num_hidden_layers: Option<u64>,
    num_attention_heads: u64,
    /// Absent in models without grouped-query attention: one KV head per query head.
    num_key_value_heads: Option<u64>,
    /// Absent in most Llama and Qwen2 configs: hidden_size / num_attention_heads.
    head_dim: Option<u64>,
    hidden_size: Option<u64>,
    /// Multi-head latent attention (DeepSeek V3): each position caches this latent and one
    /// rotary key of `qk_rope_head_dim` instead of keys and values per head.
    kv_lora_rank: Option<u64>,
    qk_rope_head_dim: Option<u64>,
    /// transformers 5 writes `dtype`, earlier versions `torch_dtype`.
    dtype: Option<String>,
    torch_dtype: Option<String>,
    #[serde(flatten)]
    recurrent: RecurrentConfig,
}

/// The fields of a hybrid model's `config.json` that say which layers are recurrent and how
/// large their state is: Qwen3-Next's and Qwen3.5's gated DeltaNet (every
/// `full_attention_interval`-th layer attends), LFM2's short convolutions (`layer_types`), the
/// Mamba-2 mixers of Nemotron-H (`hybrid_override_pattern` or `layers_block_type`, whose MLP
/// layers hold neither keys nor state) and Granite 4 (`layer_types`).
#[derive(Debug, Default, Deserialize)]
struct RecurrentConfig {
    layer_types: Option<Vec<String>>,
    hybrid_override_pattern: Option<String>,
    layers_block_type: Option<Vec<String>>,
    full_attention_interval: Option<u64>,
    linear_num_key_heads: Option<u64>,
    linear_num_value_heads: Option<u64>,
    linear_key_head_dim: Option<u64>,
    linear_value_head_dim: Option<u64>,
    linear_conv_kernel_dim: Option<u64>,
    #[serde(rename = "conv_L_cache")]
    conv_l_cache: Option<u64>,
    #[serde(flatten)]
    mamba: MambaConfig,
}

/// A Mamba-2 mixer's sizes, under Nemotron-H's names or Granite 4's (`mamba_*`).
#[derive(Debug, Default, Deserialize)]
struct MambaConfig {
    #[serde(alias = "mamba_n_heads")]
    mamba_num_heads: Option<u64>,
    /// Granite 4 may write `"auto"`: `mamba_expand × hidden_size` over the heads.
    #[serde(alias = "mamba_d_head")]
    mamba_head_dim: Option<serde_json::Value>,
    mamba_expand: Option<u64>,
    #[serde(alias = "mamba_d_state")]
    ssm_state_size: Option<u64>,
    #[serde(alias = "mamba_n_groups")]
    n_groups: Option<u64>,
    #[serde(alias = "mamba_d_conv")]
    conv_kernel: Option<u64>,
}

/// What a layer keeps for a sequence.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LayerKind {
    Attention,
    Recurrent,
    /// Nemotron-H's MLP and expert layers.
    Neither,
}

impl RecurrentConfig {
    /// Each layer's kind, where the config lists them.
    fn layer_kinds(&self) -> Option<Vec<LayerKind>> {
        if let Some(pattern) = &self.hybrid_override_pattern {
            let kind = |block| match block {
                'M' => LayerKind::Recurrent,
                '*' => LayerKind::Attention,
                _ => LayerKind::Neither,
            };
            return Some(pattern.chars().map(kind).collect());
        }
        let types = self
            .layers_block_type
            .as_ref()
            .or(self.layer_types.as_ref())?;
        let kind = |name: &String| match name.as_str() {
            "linear_attention" | "conv" | "mamba" => LayerKind::Recurrent,
            "mlp" | "moe" => LayerKind::Neither,
            _ => LayerKind::Attention,
        };
        Some(types.iter().map(kind).collect())
    }

    /// How many of `layers` attend (keep keys and values) and how many keep a recurrent state.
    fn attention_and_recurrent_layers(&self, layers: u64) -> (u64, u64) {
        let count = |kinds: &[LayerKind], of: LayerKind| {
            u64::try_from(kinds.iter().filter(|&&kind| kind == of).count()).unwrap_or(u64::MAX)
        };
        if let Some(kinds) = self.layer_kinds() {
            return (
                count(&kinds, LayerKind::Attention),
                count(&kinds, LayerKind::Recurrent),
            );
        }
        let recurrent = match (self.full_attention_interval, self.linear_num_value_heads) {
            (Some(interval), Some(_)) if interval > 0 => layers - layers / interval,
            _ => 0,
        };
        (layers - recurrent, recurrent)
    }

    /// One recurrent layer's state for one sequence: the convolution's last inputs in the
    /// activation dtype and, for gated DeltaNet, its f32 memory of a key by value matrix per
    /// value head, for Mamba-2 its f32 scan state of a head by state matrix per head. Constant
    /// in the sequence's length.
    fn state_bytes(&self, hidden: u64, element_bytes: u64) -> u64 {
        let mamba = &self.mamba;
        if let Some(heads) = mamba.mamba_num_heads {
            let head_dim = match mamba
                .mamba_head_dim
                .as_ref()
                .and_then(serde_json::Value::as_u64)
            {
                Some(dim) => dim,
                None => mamba.mamba_expand.unwrap_or(2) * hidden / heads.max(1),
            };
            let state = mamba.ssm_state_size.unwrap_or(128);
            let channels = heads * head_dim + 2 * mamba.n_groups.unwrap_or(1) * state;
            let conv = mamba.conv_kernel.unwrap_or(4).saturating_sub(1) * channels;
            return conv * element_bytes + heads * head_dim * state * 4;
        }
        if let Some(value_heads) = self.linear_num_value_heads {
            let key_dim = self.linear_key_head_dim.unwrap_or(128);
            let value_dim = self.linear_value_head_dim.unwrap_or(128);
            let keys = self.linear_num_key_heads.unwrap_or(value_heads) * key_dim;
            let channels = 2 * keys + value_heads * value_dim;
            let conv = self.linear_conv_kernel_dim.unwrap_or(4).saturating_sub(1) * channels;
            return conv * element_bytes + value_heads * key_dim * value_dim * 4;
        }
        self.conv_l_cache.unwrap_or(3).saturating_sub(1) * hidden * element_bytes
    }
}

/// `config.json`'s attention shape: a multimodal wrapper's (gemma3, mistral3, llama4) is under
/// `text_config`, with the dtype at either level.
fn attention_config(config: &serde_json::Value) -> serde_json::Result<AttentionConfig> {
    let Some(text) = config.get("text_config").filter(|text| text.is_object()) else {
        return AttentionConfig::deserialize(config);
    };
    let mut attention = AttentionConfig::deserialize(text)?;
    if attention.dtype.is_none() && attention.torch_dtype.is_none() {
        attention.dtype = config
            .get("dtype")
            .or_else(|| config.get("torch_dtype"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned);
    }
    Ok(attention)
}

/// Estimates the model in `model_dir`, or in one GGUF file. Errors name the file or directory
/// that failed.
pub fn estimate_model_bytes(model_dir: &Path) -> io::Result<ModelEstimate> {
    let meta = fs::metadata(model_dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", model_dir.display())))?;
    if meta.is_file() {
        // A GGUF holds its weights as stored. Its attention shape is in metadata only the worker
        // parses, so no KV reserve is counted, the process's base is; the footprint samples
        // catch the cache as it grows.
        return Ok(ModelEstimate {
            weight_bytes: meta.len(),
            kv_reserve_bytes: 0,
            base_bytes: PROCESS_BASE_BYTES,
        });
    }
    Ok(ModelEstimate {
        weight_bytes: weight_bytes(model_dir)?,
        kv_reserve_bytes: kv_reserve_bytes(model_dir)?,
        base_bytes: 0,
    })
}

/// The checkpoint's files, chosen as the worker loads them: a directory that also keeps
/// Mistral's `consolidated.safetensors` or other tensors beside the shards counts them once.
fn weight_bytes(model_dir: &Path) -> io::Result<u64> {
    let mut total = 0u64;
    for path in corral_ipc::weight_files(model_dir)? {
        // `fs::metadata` follows symlinks: in a Hugging Face cache snapshot every file is a
        // link to a blob, and the link's own size would be a few bytes.
        let meta = fs::metadata(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        total = total.saturating_add(meta.len());
    }
    Ok(total)
}

fn kv_reserve_bytes(model_dir: &Path) -> io::Result<u64> {
    let path = model_dir.join("config.json");
    let invalid = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {what}", path.display()),
        )
    };
    let text = fs::read_to_string(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let config = attention_config(&value).map_err(|e| invalid(e.to_string()))?;
    if config.num_attention_heads == 0 {
        return Err(invalid("num_attention_heads is 0".to_owned()));
    }
    let head_dim = match (config.head_dim, config.hidden_size) {
        (Some(head_dim), _) => head_dim,
        (None, Some(hidden)) => hidden / config.num_attention_heads,
        (None, None) => {
            return Err(invalid(
                "neither head_dim nor hidden_size is set".to_owned(),
            ));
        }
    };
    let kv_heads = config
        .num_key_value_heads
        .unwrap_or(config.num_attention_heads);
    let per_position = match config.kv_lora_rank {
        Some(rank) => rank.saturating_add(config.qk_rope_head_dim.unwrap_or(0)),
        None => kv_heads.saturating_mul(head_dim).saturating_mul(2), // keys and values
    };
    // Keys and values are kept in the activation dtype; quantized checkpoints still run in f16.
    let element_bytes = match config.dtype.as_deref().or(config.torch_dtype.as_deref()) {
        Some("float32") => 4,
        _ => 2,
    };
    let listed = config
        .recurrent
        .layer_kinds()
        .map(|kinds| kinds.len() as u64);
    let layers = config
        .num_hidden_layers
        .or(listed)
        .ok_or_else(|| invalid("no num_hidden_layers".to_owned()))?;
    let (attention, recurrent) = config.recurrent.attention_and_recurrent_layers(layers);
    let (attention, recurrent) = (attention.min(layers), recurrent.min(layers));
    let states = recurrent.saturating_mul(
        config
            .recurrent
            .state_bytes(config.hidden_size.unwrap_or(0), element_bytes),
    );
    Ok([attention, per_position, element_bytes, KV_RESERVE_TOKENS]
        .into_iter()
        .fold(1u64, u64::saturating_mul)
        .saturating_add(states))
}

#[cfg(test)]
mod tests;
