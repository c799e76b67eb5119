//! `corral-worker describe`: what a model's files hold and whether this worker can serve them,
//! decided from headers and configuration files alone (no MLX, no weights read), so that the
//! supervisor can list every model it finds, with a reason for those it cannot serve, before
//! anyone asks for one.

use std::path::Path;

use corral_ipc::{ModelDescription, ModelFormat, ModelKind};
use serde::Deserialize;

use crate::gguf::{self, GgufHeader};
use crate::model::ModelConfig;

pub fn describe(path: &Path) -> ModelDescription {
    if gguf::is_gguf(path) {
        return describe_gguf(path);
    }
    let mut description = ModelDescription {
        path: path.to_path_buf(),
        format: if path.extension().is_some_and(|ext| ext == "gguf") {
            ModelFormat::Gguf
        } else {
            ModelFormat::Safetensors
        },
        architecture: None,
        quantization: None,
        size_bytes: 0,
        unservable: None,
        kind: ModelKind::Chat,
    };
    if !path.is_dir() {
        description.unservable = Some(if path.exists() {
            "neither a model directory nor a GGUF file".into()
        } else {
            "missing (a broken link?)".into()
        });
        return description;
    }
    describe_directory(path, &mut description);
    description
}

fn describe_gguf(path: &Path) -> ModelDescription {
    let mut description = ModelDescription {
        path: path.to_path_buf(),
        format: ModelFormat::Gguf,
        architecture: None,
        quantization: None,
        size_bytes: std::fs::metadata(path).map_or(0, |meta| meta.len()),
        unservable: None,
        kind: ModelKind::Chat,
    };
    match GgufHeader::read(path) {
        Ok(header) => {
            description.architecture = header.architecture().map(str::to_owned);
            description.quantization = Some(header.quantization_summary());
            description.unservable = gguf::check(&header).err().map(|error| error.to_string());
        }
        Err(error) => description.unservable = Some(error.to_string()),
    }
    description
}

/// The parts of `config.json` that say what a directory holds.
#[derive(Deserialize)]
struct ConfigSummary {
    model_type: Option<String>,
    vision_config: Option<serde_json::Value>,
    quantization: Option<QuantizationSummary>,
    torch_dtype: Option<String>,
    dtype: Option<String>,
}

#[derive(Deserialize)]
struct QuantizationSummary {
    bits: u32,
}

fn describe_directory(dir: &Path, description: &mut ModelDescription) {
    let weights: Vec<_> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "safetensors"))
                .collect()
        })
        .unwrap_or_default();
    description.size_bytes = weights
        .iter()
        .filter_map(|path| std::fs::metadata(path).ok())
        .map(|meta| meta.len())
        .sum();
    let config_path = dir.join("config.json");
    let summary: Option<ConfigSummary> = std::fs::read_to_string(&config_path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok());
    if let Some(summary) = &summary {
        description.architecture = summary.model_type.clone();
        description.quantization = match &summary.quantization {
            Some(quantization) => Some(format!("{}-bit", quantization.bits)),
            None => summary
                .torch_dtype
                .as_deref()
                .or(summary.dtype.as_deref())
                .map(short_dtype),
        };
    }
    description.unservable = if summary.as_ref().is_some_and(|s| s.vision_config.is_some()) {
        Some("a vision model (config.json has vision_config); corral serves text models".into())
    } else if let Err(error) = ModelConfig::load(dir) {
        Some(error.to_string())
    } else if weights.is_empty() {
        Some(format!("{}: no *.safetensors weights", dir.display()))
    } else if !dir.join("tokenizer.json").is_file() {
        Some(format!("{}: no tokenizer.json", dir.display()))
    } else {
        None
    };
}

fn short_dtype(dtype: &str) -> String {
    match dtype {
        "float32" => "f32",
        "float16" => "f16",
        "bfloat16" => "bf16",
        other => other,
    }
    .to_owned()
}
