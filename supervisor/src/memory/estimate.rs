//! What a model will hold once loaded, estimated from its directory before any worker starts, so
//! admission can refuse or make room first: the safetensors files' sizes (the weights are loaded
//! as stored) plus a KV cache reserve computed from `config.json`; a GGUF file counts its size.

use std::fs;
use std::io;
use std::path::Path;

use serde::Deserialize;

/// Tokens of KV cache reserved per model. A worker's cache grows with its context, so the real
/// amount is unknown at load time; 4096 tokens covers a typical chat exchange without reserving a
/// long context's worth that most requests never use. The footprint samples and the watermarks
/// catch what grows past it.
pub const KV_RESERVE_TOKENS: u64 = 4096;

/// A model's expected memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelEstimate {
    /// The sum of the `*.safetensors` files' sizes.
    pub weight_bytes: u64,
    /// Keys and values for `KV_RESERVE_TOKENS` tokens across all layers.
    pub kv_reserve_bytes: u64,
}

impl ModelEstimate {
    /// Weights plus 5% (allocator slack, runtime buffers), plus the KV reserve.
    pub fn total(&self) -> u64 {
        let weights = u128::from(self.weight_bytes) * 105 / 100;
        u64::try_from(weights)
            .unwrap_or(u64::MAX)
            .saturating_add(self.kv_reserve_bytes)
    }
}

/// The fields of `config.json` the KV cache's size depends on.
#[derive(Debug, Deserialize)]
struct AttentionConfig {
    num_hidden_layers: u64,
    num_attention_heads: u64,
    /// Absent in models without grouped-query attention: one KV head per query head.
    num_key_value_heads: Option<u64>,
    /// Absent in most Llama and Qwen2 configs: hidden_size / num_attention_heads.
    head_dim: Option<u64>,
    hidden_size: Option<u64>,
    torch_dtype: Option<String>,
}

/// Estimates the model in `model_dir`, or in one GGUF file. Errors name the file or directory
/// that failed.
pub fn estimate_model_bytes(model_dir: &Path) -> io::Result<ModelEstimate> {
    let meta = fs::metadata(model_dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", model_dir.display())))?;
    if meta.is_file() {
        // A GGUF holds its weights as stored. Its attention shape is in metadata only the worker
        // parses, so no KV reserve is counted; the footprint samples catch the cache as it grows.
        return Ok(ModelEstimate {
            weight_bytes: meta.len(),
            kv_reserve_bytes: 0,
        });
    }
    Ok(ModelEstimate {
        weight_bytes: weight_bytes(model_dir)?,
        kv_reserve_bytes: kv_reserve_bytes(model_dir)?,
    })
}

fn weight_bytes(model_dir: &Path) -> io::Result<u64> {
    let context =
        |path: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let mut total = 0u64;
    for entry in fs::read_dir(model_dir).map_err(|e| context(model_dir, e))? {
        let path = entry.map_err(|e| context(model_dir, e))?.path();
        if path.extension().is_some_and(|ext| ext == "safetensors") {
            // `fs::metadata` follows symlinks: in a Hugging Face cache snapshot every file is a
            // link to a blob, and the link's own size would be a few bytes.
            total = total.saturating_add(fs::metadata(&path).map_err(|e| context(&path, e))?.len());
        }
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
    let config: AttentionConfig =
        serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
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
    // Keys and values are kept in the activation dtype; quantized checkpoints still run in f16.
    let element_bytes = match config.torch_dtype.as_deref() {
        Some("float32") => 4,
        _ => 2,
    };
    Ok([
        config.num_hidden_layers,
        kv_heads,
        head_dim,
        2, // keys and values
        element_bytes,
        KV_RESERVE_TOKENS,
    ]
    .into_iter()
    .fold(1u64, u64::saturating_mul))
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};

    fn tiny(arch: Arch, dtype: Dtype) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let options = FixtureOptions {
            size: Size::Tiny,
            arch,
            dtype,
            quantize: None,
            format: Format::Safetensors,
        };
        corral_fixture::generate(&options, dir.path()).unwrap();
        dir
    }

    #[test]
    fn a_fixture_is_estimated_from_its_weights_file_and_attention_shape() {
        let dir = tiny(Arch::Llama, Dtype::F16);
        let estimate = estimate_model_bytes(dir.path()).unwrap();
        let file = fs::metadata(dir.path().join("model.safetensors"))
            .unwrap()
            .len();
        assert_eq!(estimate.weight_bytes, file);
        // Tiny: 4 layers, 4 KV heads of 32 dims, keys and values, 2 bytes each.
        assert_eq!(
            estimate.kv_reserve_bytes,
            4 * 4 * 32 * 2 * 2 * KV_RESERVE_TOKENS
        );
        assert_eq!(
            estimate.total(),
            file * 105 / 100 + estimate.kv_reserve_bytes
        );
    }

    #[test]
    fn f32_models_reserve_four_bytes_per_cached_element() {
        // Qwen2 also leaves head_dim out, so it is derived: 256 hidden / 8 heads = 32.
        let dir = tiny(Arch::Qwen2, Dtype::F32);
        let estimate = estimate_model_bytes(dir.path()).unwrap();
        assert_eq!(
            estimate.kv_reserve_bytes,
            4 * 4 * 32 * 2 * 4 * KV_RESERVE_TOKENS
        );
    }

    #[test]
    fn missing_kv_heads_default_to_the_attention_heads() {
        let dir = tempfile::tempdir().unwrap();
        let config = r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}"#;
        fs::write(dir.path().join("config.json"), config).unwrap();
        fs::write(dir.path().join("a.safetensors"), [0u8; 100]).unwrap();
        fs::write(dir.path().join("b.safetensors"), [0u8; 50]).unwrap();
        fs::write(dir.path().join("tokenizer.json"), [0u8; 1000]).unwrap();
        let estimate = estimate_model_bytes(dir.path()).unwrap();
        assert_eq!(estimate.weight_bytes, 150);
        assert_eq!(
            estimate.kv_reserve_bytes,
            2 * 4 * 16 * 2 * 2 * KV_RESERVE_TOKENS
        );
    }

    #[test]
    fn a_gguf_file_is_estimated_from_its_size() {
        let dir = tempfile::tempdir().unwrap();
        // An Ollama blob: a GGUF without the extension.
        let blob = dir.path().join("sha256-0123");
        fs::write(&blob, [0u8; 4096]).unwrap();
        let estimate = estimate_model_bytes(&blob).unwrap();
        assert_eq!(estimate.weight_bytes, 4096);
        assert_eq!(estimate.kv_reserve_bytes, 0);
    }

    #[test]
    fn total_adds_five_percent_to_the_weights() {
        let estimate = ModelEstimate {
            weight_bytes: 1_000_000_007,
            kv_reserve_bytes: 3,
        };
        assert_eq!(estimate.total(), 1_000_000_007 * 105 / 100 + 3);
        let huge = ModelEstimate {
            weight_bytes: u64::MAX,
            kv_reserve_bytes: 1,
        };
        assert_eq!(huge.total(), u64::MAX);
    }

    #[test]
    fn errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent");
        let error = estimate_model_bytes(&missing).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert!(error.to_string().contains("absent"), "{error}");

        let config = dir.path().join("config.json");
        let error = estimate_model_bytes(dir.path()).unwrap_err();
        assert!(
            error.to_string().contains(&config.display().to_string()),
            "{error}"
        );

        fs::write(&config, r#"{"num_hidden_layers": "many"}"#).unwrap();
        let error = estimate_model_bytes(dir.path()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(
            error.to_string().contains(&config.display().to_string()),
            "{error}"
        );
    }
}
