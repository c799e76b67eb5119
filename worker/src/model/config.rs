//! `config.json` of a Hugging Face checkpoint: the keys every decoder has, read here; each
//! architecture's own keys are read by its file in `arch/` from [`ModelConfig::raw`].
//!
//! Defaults follow mlx-lm, the reference this engine is checked against, so a checkpoint that loads
//! there loads the same way here.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::error::ModelError;
use super::supported::SUPPORTED;

mod class_defaults;

#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// `model_type`, one of [`SUPPORTED`].
    pub model_type: String,
    pub hidden_size: i32,
    /// The dense MLP's width; absent from a config whose every MLP is a mixture of experts
    /// (transformers' `Qwen3_5MoeTextConfig` has no such field): see [`Self::intermediate_size`].
    pub dense_width: Option<i32>,
    pub num_layers: i32,
    pub num_heads: i32,
    pub num_kv_heads: i32,
    pub head_dim: i32,
    pub vocab_size: i32,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub rope_traditional: bool,
    pub rope_scaling: Option<RopeScaling>,
    pub max_position_embeddings: usize,
    /// `None` when config.json does not say; the weights decide (is there an `lm_head`?).
    pub tie_word_embeddings: Option<bool>,
    pub quantization: Option<Quantization>,
    /// Layers quantized otherwise than `quantization` says, by prefix (`model.embed_tokens`), as
    /// mlx-lm writes mixed-precision models.
    pub layer_quantization: HashMap<String, Quantization>,
    /// The whole `config.json`, for the keys only one architecture has (a wrapper's
    /// `text_config`, with the wrapper's changes).
    pub raw: serde_json::Value,
    /// The multimodal wrapper whose text model this is, if `model_type` names one.
    pub wrapper: Option<&'static Wrapper>,
    /// Where `raw` came from, for errors.
    pub path: std::path::PathBuf,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    Linear {
        factor: f32,
    },
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position_embeddings: f32,
    },
    /// YaRN: frequencies between `beta_slow` and `beta_fast` rotations over the original context
    /// blend from scaled to unscaled, and queries and keys are scaled by the mscale ratio.
    Yarn {
        factor: f64,
        original_max_position_embeddings: f64,
        beta_fast: f64,
        beta_slow: f64,
        mscale: f64,
        mscale_all_dim: f64,
        /// Whether the blend's ends are rounded to whole pairs (transformers' `truncate`,
        /// false in gpt-oss's config; mlx-lm always rounds).
        truncate: bool,
    },
    /// Phi-3's longrope (`su`): the long factors past `original_max_position_embeddings`, the
    /// short ones (where given) before it, and queries and keys scaled by the context's growth.
    /// The lengths are where the checkpoint states them; an architecture fills in its defaults.
    LongRope {
        long_factor: Vec<f32>,
        short_factor: Option<Vec<f32>>,
        original_max_position_embeddings: Option<f64>,
        max_position_embeddings: Option<f64>,
    },
}

/// How MLX packed one layer's weight: `{layer}.weight` holds `bits`-bit values in `uint32`
/// words, `{layer}.scales` one scale per `group_size` of them (and affine's `{layer}.biases`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantization {
    pub group_size: i32,
    pub bits: i32,
    pub mode: QuantMode,
}

/// A `quantization` entry as mlx-lm writes it. The mixed recipes write `"group_size": null`
/// unless convert is given one, and an entry without a mode is affine whatever the model's mode
/// (mlx-lm passes the entry to `to_quantized`, whose defaults these are).
#[derive(Deserialize)]
struct RawQuantization {
    group_size: Option<i32>,
    bits: Option<i32>,
    #[serde(default)]
    mode: QuantMode,
    /// nvfp4 experts with one tensor scale each (`quantize_model(global_scale=True)`).
    #[serde(default)]
    global_scale: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantMode {
    /// Integers with a float scale and bias per group.
    #[default]
    Affine,
    /// OCP microscaling: 4-bit floats (e2m1) with a shared power-of-two scale (e8m0) per 32.
    Mxfp4,
    /// OCP microscaling: 8-bit floats (e4m3) with a shared power-of-two scale (e8m0) per 32.
    Mxfp8,
    /// NVIDIA's 4-bit floats (e2m1) with an e4m3 scale per 16.
    Nvfp4,
}

/// Why nvfp4 experts quantized with one tensor scale each (`quantize_model(global_scale=True)`)
/// are refused: MLX 0.32's dequantize takes such a scale but its gather_qmm does not (mlx-lm
/// 0.32.2 passes one and fails on it), so nothing computes them as mlx-lm means.
pub const GLOBAL_SCALE_UNSUPPORTED: &str =
    "with a global scale per expert is not supported: MLX's gather_qmm takes none";

/// The float modes, which keep their scales as `uint8` and have no biases.
const FLOAT_MODES: [QuantMode; 3] = [QuantMode::Mxfp4, QuantMode::Mxfp8, QuantMode::Nvfp4];

impl QuantMode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Affine => "affine",
            Self::Mxfp4 => "mxfp4",
            Self::Mxfp8 => "mxfp8",
            Self::Nvfp4 => "nvfp4",
        }
    }

    /// The group size and bits MLX uses when an entry leaves them out; a float mode's only ones.
    fn defaults(self) -> (i32, i32) {
        match self {
            Self::Affine => (64, 4),
            Self::Mxfp4 => (32, 4),
            Self::Mxfp8 => (32, 8),
            Self::Nvfp4 => (16, 4),
        }
    }

    /// Whether MLX (`quantize`, `quantized_matmul`, `gather_qmm`, `dequantize`, on the CPU as on
    /// Metal) computes with this group size and bit count in this mode.
    fn allows(self, group_size: i32, bits: i32) -> bool {
        match self {
            Self::Affine => {
                SUPPORTED_BITS.contains(&bits) && SUPPORTED_GROUP_SIZES.contains(&group_size)
            }
            _ => self.defaults() == (group_size, bits),
        }
    }

    /// How `describe` names a model quantized so: affine by its bits, a float mode by name.
    pub fn label(self, bits: i32) -> String {
        match self {
            Self::Affine => format!("{bits}-bit"),
            _ => self.name().to_owned(),
        }
    }

    /// Affine's scales are floats of the weights' type; the float modes' are `uint8`.
    pub fn float_scales(self) -> bool {
        self == Self::Affine
    }
}

impl Quantization {
    /// What a layer's tensors say they were packed with, as mlx-lm 0.32.2 reads a layer that
    /// config.json does not name (`infer_quant_config`): `columns` of the float weight,
    /// `packed_columns` of `{layer}.weight`, `scale_columns` of `{layer}.scales`, and whether
    /// those scales are floats (affine) or `uint8` (a float mode, told by its bits and group).
    /// `None` where no mode MLX has packs them so.
    pub fn inferred(
        columns: i32,
        packed_columns: i32,
        scale_columns: i32,
        float_scales: bool,
    ) -> Option<Self> {
        if columns <= 0 || scale_columns <= 0 || (packed_columns * 32) % columns != 0 {
            return None;
        }
        let (group_size, bits) = (columns / scale_columns, packed_columns * 32 / columns);
        if group_size * scale_columns != columns {
            return None;
        }
        let mode = if float_scales {
            QuantMode::Affine
        } else {
            *FLOAT_MODES
                .iter()
                .find(|mode| mode.defaults() == (group_size, bits))?
        };
        mode.allows(group_size, bits).then_some(Self {
            group_size,
            bits,
            mode,
        })
    }

    /// The float mode whose `uint8` scales each cover `words_per_scale` packed words (mxfp4's
    /// 32 4-bit values fill 4 words, mxfp8's 8, nvfp4's 16 4-bit values 2), from tensor headers
    /// alone; `None` for a ratio no float mode has.
    pub fn float_mode_of(words_per_scale: u64) -> Option<QuantMode> {
        FLOAT_MODES.into_iter().find(|mode| {
            let (group_size, bits) = mode.defaults();
            (group_size * bits / 32) as u64 == words_per_scale
        })
    }
}

#[derive(Deserialize)]
struct RawConfig {
    hidden_size: i32,
    /// LFM2 may name it `block_ff_dim` alone.
    intermediate_size: Option<i32>,
    block_ff_dim: Option<i32>,
    /// Nemotron-H's may leave it out: its layer list, `hybrid_override_pattern` or
    /// transformers 5's `layers_block_type`, has one entry per layer.
    num_hidden_layers: Option<i32>,
    hybrid_override_pattern: Option<String>,
    layers_block_type: Option<Vec<serde_json::Value>>,
    num_attention_heads: i32,
    num_key_value_heads: Option<i32>,
    head_dim: Option<i32>,
    vocab_size: i32,
    /// LFM2 names it `norm_eps`.
    rms_norm_eps: Option<f32>,
    norm_eps: Option<f32>,
    /// Nemotron-H names it `layer_norm_epsilon`.
    layer_norm_epsilon: Option<f32>,
    rope_theta: Option<f32>,
    #[serde(default)]
    rope_traditional: bool,
    rope_scaling: Option<serde_json::Value>,
    /// transformers 5 writes `rope_theta` and the scaling into this one object.
    rope_parameters: Option<serde_json::Value>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
}

const DEFAULT_ROPE_THETA: f32 = 10_000.0;

const SUPPORTED_BITS: [i32; 6] = [2, 3, 4, 5, 6, 8];
const SUPPORTED_GROUP_SIZES: [i32; 3] = [32, 64, 128];

impl ModelConfig {
    /// The dense MLP's width, for an architecture that has one: an error naming the key when
    /// config.json has neither `intermediate_size` nor LFM2's `block_ff_dim`.
    pub fn intermediate_size(&self) -> Result<i32, ModelError> {
        self.dense_width.ok_or_else(|| ModelError::Config {
            path: self.path.clone(),
            message: format!("{} needs intermediate_size", self.model_type),
        })
    }

    /// Each layer's kind (`full_attention`, `sliding_attention`, `linear_attention`, ...) where
    /// config.json lists them, as transformers 5 writes every layered config: it then decides
    /// over an architecture's older pattern keys (`sliding_window_pattern`,
    /// `full_attention_interval`), which transformers no longer writes.
    pub fn layer_types(&self) -> Result<Option<Vec<String>>, ModelError> {
        let Some(kinds) = self.key::<Vec<String>>("layer_types")? else {
            return Ok(None);
        };
        if kinds.len() != self.num_layers as usize {
            return Err(ModelError::Config {
                path: self.path.clone(),
                message: format!("layer_types must name {} layers", self.num_layers),
            });
        }
        Ok(Some(kinds))
    }

    /// transformers 5's rotation for the layers of one kind (`rope_parameters.full_attention`),
    /// where the config nests one per kind.
    pub fn rope_parameters_of(&self, kind: &str) -> Option<&serde_json::Value> {
        self.raw.get("rope_parameters")?.get(kind)
    }

    /// A rotation key (`partial_rotary_factor`) at the top level, else where transformers 5
    /// writes it, in `rope_parameters`; `default` when in neither.
    pub fn rope_key_or<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
        default: T,
    ) -> Result<T, ModelError> {
        if let Some(value) = self.key(name)? {
            return Ok(value);
        }
        let nested = self
            .raw
            .get("rope_parameters")
            .and_then(|all| all.get(name));
        match nested {
            Some(value) => {
                serde_json::from_value(value.clone()).map_err(|error| ModelError::Config {
                    path: self.path.clone(),
                    message: format!("rope_parameters.{name}: {error}"),
                })
            }
            None => Ok(default),
        }
    }

    /// For a typed record's key whose `null` means something else than its absence
    /// (`#[serde(default, deserialize_with = "ModelConfig::present")]` on an
    /// `Option<Option<T>>`): absent is `None`, `null` is `Some(None)`.
    pub fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
    where
        D: serde::Deserializer<'de>,
        T: serde::Deserialize<'de>,
    {
        Option::<T>::deserialize(deserializer).map(Some)
    }

    /// An architecture's own keys as its typed record `A`, whose `Default` holds transformers'
    /// class defaults: a key the config leaves out takes that default, a key `A` does not name
    /// is ignored, and a malformed one (`null` included, where the record has no `Option`) is an
    /// error naming it.
    pub fn args<A: serde::de::DeserializeOwned>(&self) -> Result<A, ModelError> {
        serde_path_to_error::deserialize(&self.raw).map_err(|error| ModelError::Config {
            path: self.path.clone(),
            message: format!("{}: {}", error.path(), error.inner()),
        })
    }

    /// One key read outside a typed record (the checkpoint's `dtype`, a nested rotation key):
    /// `Ok(None)` when absent or `null`, an error naming it when malformed.
    pub fn key<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>, ModelError> {
        match self.raw.get(name) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(value) => serde_json::from_value(value.clone())
                .map(Some)
                .map_err(|error| ModelError::Config {
                    path: self.path.clone(),
                    message: format!("{name}: {error}"),
                }),
        }
    }

    pub fn load(model_dir: &Path) -> Result<Self, ModelError> {
        let path = model_dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| ModelError::Io {
            path: path.clone(),
            source,
        })?;
        let value = serde_json::from_str(&text).map_err(|error| ModelError::Config {
            path: path.clone(),
            message: error.to_string(),
        })?;
        Self::from_json(value, &path)
    }

    /// Reads a `config.json` value; `path` names its source in errors (a GGUF file's metadata
    /// comes here translated into the same keys).
    pub fn from_json(value: serde_json::Value, path: &Path) -> Result<Self, ModelError> {
        let bad = |message: String| ModelError::Config {
            path: path.to_path_buf(),
            message,
        };
        // The type first: an unsupported one is named as such, whatever keys it lacks.
        let model_type = match value.get("model_type").and_then(serde_json::Value::as_str) {
            Some(model_type) if SUPPORTED.contains(&model_type) => model_type.to_owned(),
            Some(other) => {
                return Err(bad(format!(
                    "unsupported model_type {other:?} (supported: {})",
                    SUPPORTED.join(", ")
                )));
            }
            None => return Err(bad("no model_type".into())),
        };
        let wrapper = WRAPPERS
            .iter()
            .find(|wrapper| wrapper.model_type == model_type);
        let text = match wrapper {
            Some(wrapper) => wrapper.text_config(&value).map_err(bad)?,
            None => value.clone(),
        };
        let raw: RawConfig =
            serde_json::from_value(text.clone()).map_err(|error| bad(error.to_string()))?;
        let dense_width = raw.intermediate_size.or(raw.block_ff_dim);
        let rms_norm_eps = raw
            .rms_norm_eps
            .or(raw.norm_eps)
            .or(raw.layer_norm_epsilon)
            .ok_or_else(|| bad("missing field `rms_norm_eps`".into()))?;
        let num_layers = raw
            .num_hidden_layers
            .or_else(|| {
                let listed = match (&raw.hybrid_override_pattern, &raw.layers_block_type) {
                    (Some(pattern), _) => pattern.chars().count(),
                    (None, Some(types)) => types.len(),
                    (None, None) => return None,
                };
                i32::try_from(listed).ok()
            })
            .ok_or_else(|| bad("missing field `num_hidden_layers`".into()))?;
        let positive = [
            ("hidden_size", raw.hidden_size),
            ("intermediate_size", dense_width.unwrap_or(1)),
            ("num_hidden_layers", num_layers),
            ("num_attention_heads", raw.num_attention_heads),
            ("vocab_size", raw.vocab_size),
        ];
        if let Some((name, value)) = positive.iter().find(|(_, value)| *value <= 0) {
            return Err(bad(format!("{name} must be positive, found {value}")));
        }
        // The class whose defaults apply: a wrapper's text model's.
        let class = text
            .get("model_type")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(&model_type);
        let num_kv_heads = raw
            .num_key_value_heads
            .or_else(|| class_defaults::kv_heads(class))
            .unwrap_or(raw.num_attention_heads);
        if num_kv_heads <= 0 || raw.num_attention_heads % num_kv_heads != 0 {
            return Err(bad(format!(
                "num_key_value_heads {num_kv_heads} does not divide num_attention_heads {}",
                raw.num_attention_heads
            )));
        }
        let head_dim = raw
            .head_dim
            .or_else(|| class_defaults::head_dim(class))
            .unwrap_or(raw.hidden_size / raw.num_attention_heads);
        if head_dim <= 0 || head_dim % 2 != 0 {
            return Err(bad(format!(
                "head_dim must be positive and even, found {head_dim}"
            )));
        }
        // transformers 5's `rope_parameters` holds what older configs split into `rope_theta` and
        // `rope_scaling`; an architecture whose layer kinds rotate differently (Gemma) nests one
        // such object per kind and reads it itself.
        let flat_parameters = raw
            .rope_parameters
            .as_ref()
            .filter(|parameters| parameters.get("rope_type").is_some());
        let rope_theta = raw
            .rope_theta
            .or_else(|| {
                flat_parameters?
                    .get("rope_theta")?
                    .as_f64()
                    .map(|theta| theta as f32)
            })
            .or_else(|| class_defaults::rope_theta(class))
            .unwrap_or(DEFAULT_ROPE_THETA);
        let rope_scaling = raw
            .rope_scaling
            .as_ref()
            .or(flat_parameters)
            .map(|scaling| parse_rope_scaling(scaling, &text))
            .transpose()
            .map_err(bad)?
            .flatten();
        // A wrapper's quantization is its own, at the top level, naming the wrapper's layers.
        let quantization_entry = value.get("quantization").filter(|entry| !entry.is_null());
        let quantization = match quantization_entry {
            Some(entry) => parse_quantization(entry).map_err(bad)?,
            None => original_mxfp4(&value),
        };
        let mut layer_quantization = quantization_entry
            .map(parse_layer_quantization)
            .transpose()
            .map_err(bad)?
            .unwrap_or_default();
        if let Some(wrapper) = wrapper {
            layer_quantization = layer_quantization
                .into_iter()
                .filter_map(|(prefix, layer)| Some((wrapper.text_name(&prefix)?, layer)))
                .collect();
        }
        Ok(Self {
            model_type,
            hidden_size: raw.hidden_size,
            dense_width,
            num_layers,
            num_heads: raw.num_attention_heads,
            num_kv_heads,
            head_dim,
            vocab_size: raw.vocab_size,
            rms_norm_eps,
            rope_theta,
            rope_traditional: raw.rope_traditional,
            rope_scaling,
            max_position_embeddings: raw.max_position_embeddings.unwrap_or(4096),
            tie_word_embeddings: raw.tie_word_embeddings,
            quantization,
            layer_quantization,
            raw: text,
            wrapper,
            path: path.to_path_buf(),
        })
    }
}

/// A multimodal checkpoint served as its text model alone, as mlx-lm runs its wrappers
/// (`mistral3`, `gemma3`, `llama4`, ...): config.json nests the text model's keys under
/// `text_config`, and the checkpoint names the text model's tensors under `language_model.`
/// (`language_model.model.*` and `language_model.lm_head` from transformers 4 and
/// mlx-community, `model.language_model.*` and `lm_head` from transformers 5) beside the other
/// towers' tensors, which are dropped.
#[derive(Debug)]
pub struct Wrapper {
    pub model_type: &'static str,
    /// Substrings of the other towers' tensor names.
    towers: &'static [&'static str],
    /// `text_config.model_type`s served as this wrapper's text model besides [`SUPPORTED`]
    /// ones (Qwen3.5's `qwen3_5_text`, which no checkpoint has at the top level).
    text_types: &'static [&'static str],
    /// What the wrapper's config changes in its text model's, given the whole config.json.
    adjust: fn(&serde_json::Value, &mut serde_json::Map<String, serde_json::Value>),
}

/// The wrappers whose text model this worker serves; each is also in [`SUPPORTED`].
const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        model_type: "gemma3",
        text_types: &[],
        towers: &["vision_tower", "multi_modal_projector"],
        adjust: gemma3_text_config,
    },
    Wrapper {
        model_type: "gemma4",
        text_types: &[],
        towers: &[
            "vision_tower",
            "multi_modal_projector",
            "audio_tower",
            "embed_audio",
            "embed_vision",
            "vision_embedder",
        ],
        adjust: gemma4_text_config,
    },
    Wrapper {
        model_type: "kimi_k25",
        text_types: &[],
        towers: &[
            "vision_tower",
            "vision_model",
            "multi_modal_projector",
            "mm_projector",
        ],
        adjust: unchanged,
    },
    Wrapper {
        model_type: "llama4",
        text_types: &[],
        towers: &["vision_model", "multi_modal_projector"],
        adjust: unchanged,
    },
    Wrapper {
        model_type: "qwen3_5",
        text_types: &["qwen3_5_text"],
        towers: &["vision_tower", "model.visual"],
        adjust: unchanged,
    },
    Wrapper {
        model_type: "qwen3_5_moe",
        text_types: &["qwen3_5_moe_text"],
        towers: &["vision_tower", "model.visual"],
        adjust: unchanged,
    },
    Wrapper {
        model_type: "mistral3",
        text_types: &[],
        towers: &["vision_tower", "multi_modal_projector"],
        adjust: untied_unless_stated,
    },
];

fn unchanged(_: &serde_json::Value, _: &mut serde_json::Map<String, serde_json::Value>) {}

/// gemma3's own `vocab_size` replaces its text model's where it states one (transformers 4's
/// configs; transformers 5's state it in `text_config` only, default 262208), and the text
/// model's head counts default to 8 and 4.
fn gemma3_text_config(
    config: &serde_json::Value,
    text: &mut serde_json::Map<String, serde_json::Value>,
) {
    wrapper_vocab(config, text, 262_208);
    text.entry("num_attention_heads").or_insert(8.into());
    text.entry("num_key_value_heads").or_insert(4.into());
}

/// gemma4's own `vocab_size` replaces its text model's where it states one (default 262144),
/// and the text model's query heads default to 8.
fn gemma4_text_config(
    config: &serde_json::Value,
    text: &mut serde_json::Map<String, serde_json::Value>,
) {
    wrapper_vocab(config, text, 262_144);
    text.entry("num_attention_heads").or_insert(8.into());
}

/// The vocabulary: the wrapper's `vocab_size` where it states one, else the text config's, else
/// the class's default.
fn wrapper_vocab(
    config: &serde_json::Value,
    text: &mut serde_json::Map<String, serde_json::Value>,
    default: i64,
) {
    match config.get("vocab_size") {
        Some(vocab_size) => {
            text.insert("vocab_size".into(), vocab_size.clone());
        }
        None => {
            text.entry("vocab_size").or_insert(default.into());
        }
    }
}

/// mistral3's text model has its own `lm_head` unless its config says otherwise.
fn untied_unless_stated(
    _: &serde_json::Value,
    text: &mut serde_json::Map<String, serde_json::Value>,
) {
    text.entry("tie_word_embeddings").or_insert(false.into());
}

impl Wrapper {
    /// The text model's name for one of the checkpoint's tensors or quantized layers, as mlx-lm's
    /// `sanitize` renames them (`model.*`, `lm_head`); `None` for another tower's.
    pub fn text_name(&self, name: &str) -> Option<String> {
        if self.towers.iter().any(|tower| name.contains(tower)) {
            return None;
        }
        Some(match name.strip_prefix("model.language_model.") {
            Some(rest) => format!("model.{rest}"),
            None => name
                .strip_prefix("language_model.")
                .unwrap_or(name)
                .to_owned(),
        })
    }

    /// `text_config` with the wrapper's changes; its `model_type`, if stated, must be served.
    fn text_config(&self, config: &serde_json::Value) -> Result<serde_json::Value, String> {
        let mut text = config
            .get("text_config")
            .and_then(serde_json::Value::as_object)
            .cloned()
            .ok_or_else(|| format!("{} needs text_config, an object", self.model_type))?;
        if let Some(text_type) = text.get("model_type").and_then(serde_json::Value::as_str)
            && !SUPPORTED.contains(&text_type)
            && !self.text_types.contains(&text_type)
        {
            return Err(format!(
                "unsupported text_config.model_type {text_type:?} in {} (supported: {})",
                self.model_type,
                SUPPORTED.join(", ")
            ));
        }
        // transformers 5 ties a wrapper's head by the wrapper's own key, whatever its text
        // config says.
        if let Some(tied) = config
            .get("tie_word_embeddings")
            .filter(|tied| tied.is_boolean())
        {
            text.insert("tie_word_embeddings".into(), tied.clone());
        }
        (self.adjust)(config, &mut text);
        Ok(text.into())
    }
}

/// `rope_scaling` of a config.json, as mlx-lm's `initialize_rope` reads it; `config` is the
/// whole config.json, where Phi-3 keeps the context lengths longrope needs.
pub fn parse_rope_scaling(
    value: &serde_json::Value,
    config: &serde_json::Value,
) -> Result<Option<RopeScaling>, String> {
    if value.is_null() {
        return Ok(None);
    }
    let kind = value
        .get("type")
        .or_else(|| value.get("rope_type"))
        .and_then(|kind| kind.as_str())
        .unwrap_or("default");
    let number = |key: &str, default: Option<f64>| -> Result<f64, String> {
        match value.get(key).and_then(serde_json::Value::as_f64) {
            Some(number) => Ok(number),
            None => default.ok_or_else(|| format!("rope_scaling of type {kind} needs {key}")),
        }
    };
    match kind {
        "default" => Ok(None),
        "linear" => Ok(Some(RopeScaling::Linear {
            factor: number("factor", None)? as f32,
        })),
        "llama3" => Ok(Some(RopeScaling::Llama3 {
            factor: number("factor", None)? as f32,
            low_freq_factor: number("low_freq_factor", Some(1.0))? as f32,
            high_freq_factor: number("high_freq_factor", Some(4.0))? as f32,
            original_max_position_embeddings: number(
                "original_max_position_embeddings",
                Some(8192.0),
            )? as f32,
        })),
        // mlx-lm computes these in Python floats, hence f64.
        "yarn" | "deepseek_yarn" => Ok(Some(RopeScaling::Yarn {
            factor: number("factor", None)?,
            original_max_position_embeddings: number(
                "original_max_position_embeddings",
                Some(4096.0),
            )?,
            beta_fast: number("beta_fast", Some(32.0))?,
            beta_slow: number("beta_slow", Some(1.0))?,
            mscale: number("mscale", Some(1.0))?,
            mscale_all_dim: number("mscale_all_dim", Some(0.0))?,
            truncate: value
                .get("truncate")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(true),
        })),
        "longrope" | "su" => {
            let factors = |key: &str| {
                value
                    .get(key)
                    .map(|factors| serde_json::from_value(factors.clone()))
                    .transpose()
                    .map_err(|_| format!("rope_scaling's {key} must be a list of numbers"))
            };
            let long_factor = factors("long_factor")?
                .ok_or_else(|| format!("rope_scaling of type {kind} needs long_factor, a list"))?;
            let short_factor = factors("short_factor")?;
            let length = |key: &str| {
                value
                    .get(key)
                    .or_else(|| config.get(key))
                    .and_then(serde_json::Value::as_f64)
            };
            Ok(Some(RopeScaling::LongRope {
                long_factor,
                short_factor,
                original_max_position_embeddings: length("original_max_position_embeddings"),
                max_position_embeddings: config
                    .get("max_position_embeddings")
                    .and_then(serde_json::Value::as_f64),
            }))
        }
        other => Err(format!(
            "unsupported rope_scaling type {other:?} (supported: default, linear, llama3, yarn, longrope)"
        )),
    }
}

/// The quantization of an original checkpoint that ships MXFP4 tensors (openai's gpt-oss:
/// `quantization_config.quant_method` is `mxfp4`), as mlx-lm's loader reads it.
fn original_mxfp4(config: &serde_json::Value) -> Option<Quantization> {
    let method = config.get("quantization_config")?.get("quant_method")?;
    (method == "mxfp4").then_some(Quantization {
        group_size: 32,
        bits: 4,
        mode: QuantMode::Mxfp4,
    })
}

/// The entries of the `quantization` object that are themselves quantizations: one layer's.
/// An entry `false` leaves its layer unquantized, which its weights (no scales) already say.
fn parse_layer_quantization(
    value: &serde_json::Value,
) -> Result<HashMap<String, Quantization>, String> {
    let mut layers = HashMap::new();
    for (prefix, entry) in value.as_object().into_iter().flatten() {
        if entry.is_object()
            && let Some(quantization) = parse_quantization(entry)
                .map_err(|message| format!("quantization of {prefix}: {message}"))?
        {
            layers.insert(prefix.clone(), quantization);
        }
    }
    Ok(layers)
}

fn parse_quantization(value: &serde_json::Value) -> Result<Option<Quantization>, String> {
    if value.is_null() || value == &serde_json::Value::Bool(false) {
        return Ok(None);
    }
    let raw: RawQuantization = serde_json::from_value(value.clone())
        .map_err(|error| format!("bad quantization {value}: {error}"))?;
    let (default_group_size, default_bits) = raw.mode.defaults();
    let quantization = Quantization {
        group_size: raw.group_size.unwrap_or(default_group_size),
        bits: raw.bits.unwrap_or(default_bits),
        mode: raw.mode,
    };
    if raw.global_scale {
        return Err(format!(
            "{} {GLOBAL_SCALE_UNSUPPORTED}",
            quantization.mode.name()
        ));
    }
    if !quantization
        .mode
        .allows(quantization.group_size, quantization.bits)
    {
        return Err(format!(
            "quantization bits {} with group_size {} ({}) is not supported (affine: bits \
             {SUPPORTED_BITS:?}, group_size {SUPPORTED_GROUP_SIZES:?}; mxfp4: bits 4, group_size \
             32; mxfp8: bits 8, group_size 32; nvfp4: bits 4, group_size 16)",
            quantization.bits,
            quantization.group_size,
            quantization.mode.name()
        ));
    }
    Ok(Some(quantization))
}

#[cfg(test)]
mod tests;
