//! `corral-worker describe`: what a model's files hold and whether this worker can serve them,
//! decided from headers and configuration files alone (no MLX, no tensor data read), so that the
//! supervisor can list every model it finds, with a reason for those it cannot serve, before
//! anyone asks for one.

use std::path::Path;

use corral_ipc::{CacheSize, ModelDescription, ModelFormat, ModelKind, MtpLayers, WindowedCache};
use serde::Deserialize;

use crate::embedding::bert::EncoderConfig;
use crate::embedding::layout::{self, ConfigHead, Layout, Pooling, Role};
use crate::gguf::{self, GgufHeader};
use crate::model::{self, LayerCache, ModelConfig};
use crate::sampling_defaults;

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
        parameters: None,
        active_parameters: None,
        gguf_loaded_bytes: Default::default(),
        cache: None,
        unservable: None,
        kind: ModelKind::Chat,
        vision: false,
        vision_reserve_bytes: 0,
        gguf_sampling: Default::default(),
        generation_config: Default::default(),
        warnings: Vec::new(),
        mtp: MtpLayers::None,
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

/// As [`describe`], a GGUF with its vision projector (`mmproj`): a vision model where corral
/// runs the projector's type, a text model with a warning where it does not, unservable where
/// the projector cannot be read.
pub fn describe_with_projector(path: &Path, projector: &Path) -> ModelDescription {
    let mut description = describe(path);
    if description.unservable.is_some() || description.format != ModelFormat::Gguf {
        return description;
    }
    let element_bytes = match GgufHeader::read(path) {
        Ok(header) => gguf::activation_bytes(&header),
        Err(_) => 4,
    };
    match gguf::mmproj::activation_bytes(projector, element_bytes) {
        Ok(reserve) => {
            description.vision = true;
            description.vision_reserve_bytes = reserve;
        }
        Err(error @ gguf::mmproj::ProjectorError::Unsupported { .. }) => description
            .warnings
            .push(format!("{error}; its images are refused")),
        Err(error) => description.unservable = Some(format!("its vision projector: {error}")),
    }
    description
}

fn describe_gguf(path: &Path) -> ModelDescription {
    let mut description = ModelDescription {
        path: path.to_path_buf(),
        format: ModelFormat::Gguf,
        architecture: None,
        quantization: None,
        size_bytes: std::fs::metadata(path).map_or(0, |meta| meta.len()),
        parameters: None,
        active_parameters: None,
        gguf_loaded_bytes: Default::default(),
        cache: None,
        unservable: None,
        kind: ModelKind::Chat,
        vision: false,
        vision_reserve_bytes: 0,
        gguf_sampling: Default::default(),
        generation_config: Default::default(),
        warnings: Vec::new(),
        mtp: MtpLayers::None,
    };
    match GgufHeader::read(path) {
        Ok(header) => {
            // Every part of a split model.
            description.size_bytes = header.file_bytes;
            (description.gguf_sampling, description.warnings) =
                sampling_defaults::from_gguf(&header);
            description.architecture = header.architecture().map(str::to_owned);
            description.quantization = Some(header.quantization_summary());
            // GGUF dims are logical: a quantized tensor's are its values'. A
            // multi-token-prediction layer does not count, as in a directory.
            let (prediction, trunk): (Vec<_>, Vec<_>) = header
                .tensors
                .iter()
                .partition(|tensor| header.in_prediction_layer(&tensor.name));
            let parameters = trunk
                .iter()
                .map(|tensor| tensor.dims.iter().product::<u64>());
            description.parameters = Some(parameters.sum());
            // llama.cpp's converter writes the layers or leaves them out (`--no-mtp`, and
            // always for DeepSeek V3), and says nothing of a release that had them.
            if !prediction.is_empty() {
                description.mtp = MtpLayers::Kept;
            }
            match gguf::check(&header) {
                Ok((config, _)) => {
                    description.gguf_loaded_bytes = gguf::loaded_bytes(&header);
                    description.cache = cache_size(&config, gguf::activation_bytes(&header));
                }
                Err(error) => description.unservable = Some(error.to_string()),
            }
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

/// The keys that name a checkpoint's multi-token-prediction layers: DeepSeek V3's and
/// GLM-4.5's, Qwen3.5's and Qwen3-Next's.
#[derive(Deserialize, Default)]
#[serde(default)]
struct MtpArgs {
    num_nextn_predict_layers: u32,
    mtp_num_hidden_layers: u32,
}

/// Whether the checkpoint kept the multi-token-prediction layers its config names, given
/// whether its weights hold `prediction_heads`.
fn mtp_layers(config: &ModelConfig, prediction_heads: bool) -> MtpLayers {
    let named = config
        .args::<MtpArgs>()
        .is_ok_and(|args| args.num_nextn_predict_layers + args.mtp_num_hidden_layers > 0);
    match (prediction_heads, named) {
        (true, _) => MtpLayers::Kept,
        (false, true) => MtpLayers::Dropped,
        (false, false) => MtpLayers::None,
    }
}

fn describe_directory(dir: &Path, description: &mut ModelDescription) {
    // An unreadable directory or index shows as no weights, which the reason below names.
    let weights = corral_ipc::weight_files(dir).unwrap_or_default();
    description.size_bytes = weights
        .iter()
        .filter_map(|path| std::fs::metadata(path).ok())
        .map(|meta| meta.len())
        .sum();
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).ok();
    let summary: Option<ConfigSummary> = text
        .as_deref()
        .and_then(|text| serde_json::from_str(text).ok());
    let head: ConfigHead = text
        .as_deref()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
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
    (description.generation_config, description.warnings) =
        sampling_defaults::from_generation_config(dir);
    let decoder = ModelConfig::load(dir);
    if let Ok(config) = &decoder {
        // Weights that cannot be counted are named by the load; the listing goes without counts.
        if let Ok(count) = model::count_parameters(dir, config) {
            description.parameters = Some(count.total);
            description.active_parameters = count.active;
            description.mtp = mtp_layers(config, count.prediction_heads);
        }
        let activation_bytes = match config
            .key::<String>("dtype")
            .ok()
            .flatten()
            .or_else(|| config.key::<String>("torch_dtype").ok().flatten())
        {
            Some(dtype) if dtype == "float32" => 4,
            _ => 2,
        };
        description.cache = cache_size(config, activation_bytes);
        description.vision = model::has_vision_tower(config, dir);
        if description.vision {
            description.vision_reserve_bytes =
                model::vision_activation_bytes(config, dir, activation_bytes);
        }
        if let Some(quantization) = config.quantization {
            description.quantization = Some(quantization.mode.label(quantization.bits));
        } else if description.quantization.is_none() {
            description.quantization = config
                .key::<String>("dtype")
                .ok()
                .flatten()
                .or_else(|| config.key::<String>("torch_dtype").ok().flatten())
                .map(|dtype| short_dtype(&dtype));
        }
    }
    let role = layout::role(dir, &head, decoder.is_ok());
    description.kind = match role {
        Role::EncoderEmbedding | Role::DecoderEmbedding => ModelKind::Embedding,
        Role::CrossEncoder | Role::DecoderReranker => ModelKind::Rerank,
        Role::Chat => ModelKind::Chat,
    };
    // A wrapper's text model is served, with its vision tower where the worker runs it.
    let text_of_wrapper = decoder
        .as_ref()
        .is_ok_and(|config| config.wrapper.is_some());
    let vision = summary.as_ref().is_some_and(|s| s.vision_config.is_some());
    description.unservable = if vision && !text_of_wrapper {
        Some("a vision model (config.json has vision_config); corral serves text models".into())
    } else if let Some(reason) = unservable_role(dir, role, &head) {
        Some(reason)
    } else if let (Role::Chat, Err(error)) = (role, &decoder) {
        Some(error.to_string())
    } else if let Some(reason) = decoder
        .is_ok()
        .then(|| model::unrunnable_quantization(dir).ok().flatten())
        .flatten()
    {
        // Unreadable headers are the load's to name, as for the parameter count.
        Some(reason)
    } else if weights.is_empty() {
        Some(format!("{}: no *.safetensors weights", dir.display()))
    } else if !dir.join("tokenizer.json").is_file() {
        Some(format!("{}: no tokenizer.json", dir.display()))
    } else {
        None
    };
}

/// One sequence's caches for the layers `config`'s architecture lays out (`None` when the
/// config does not say; the load will name why).
fn cache_size(config: &ModelConfig, activation_bytes: u64) -> Option<CacheSize> {
    let layers = model::layer_caches_for(config).ok()?;
    Some(layers_cache_size(&layers, activation_bytes))
}

/// What `layers` keep for one sequence, each element `activation_bytes` wide (the recurrent
/// memories in f32 whatever the model's type).
pub fn layers_cache_size(layers: &[LayerCache], activation_bytes: u64) -> CacheSize {
    let count = |value: i32| u64::try_from(value).unwrap_or(0);
    let mut size = CacheSize::default();
    for layer in layers {
        match *layer {
            LayerCache::Positions { shape, window } => {
                let bytes = u64::try_from(shape.elements()).unwrap_or(0) * activation_bytes;
                match window {
                    Some(window) => size.windowed.push(WindowedCache {
                        window: count(window),
                        bytes_per_position: bytes,
                    }),
                    None => size.bytes_per_position += bytes,
                }
            }
            LayerCache::State(state) => size.bytes_per_sequence += state.bytes(activation_bytes),
            LayerCache::Shared => {}
        }
    }
    size
}

/// Why an embedding or rerank model cannot be served, from its configuration.
fn unservable_role(dir: &Path, role: Role, head: &ConfigHead) -> Option<String> {
    match role {
        Role::Chat => None,
        Role::CrossEncoder if !head.is_encoder() => Some(format!(
            "a sequence-classification head on {} is not supported (corral reranks with BERT-family cross-encoders and Qwen3-Reranker-style decoders)",
            head.model_type
                .as_deref()
                .unwrap_or("an unknown model_type")
        )),
        Role::EncoderEmbedding | Role::CrossEncoder => EncoderConfig::load(dir)
            .err()
            .map(|error| error.to_string())
            .or_else(|| {
                Layout::read(dir, Pooling::Mean)
                    .err()
                    .map(|error| error.to_string())
            }),
        Role::DecoderEmbedding | Role::DecoderReranker => {
            match Layout::read(dir, Pooling::LastToken) {
                Err(error) => Some(error.to_string()),
                Ok(layout)
                    if role == Role::DecoderEmbedding && layout.pooling != Pooling::LastToken =>
                {
                    Some("a decoder embedding model must pool its last token".into())
                }
                Ok(_) => None,
            }
        }
    }
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

#[cfg(test)]
mod tests;
