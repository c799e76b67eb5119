//! The checkpoint's tensors, loaded through MLX from `*.safetensors` files.
//!
//! MLX reads each tensor straight from the file into its own array (no intermediate host copy).
//! Before that, every file's header is checked here against the file's length, so a truncated
//! or corrupt file ends with an error naming it instead of an MLX abort during evaluation.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use mlx_rs::{Array, Dtype};

use super::config::{GLOBAL_SCALE_UNSUPPORTED, Quantization, Wrapper};
use super::error::ModelError;
use super::pipeline::LayerShare;
use super::tensor_parallel::TensorShard;

/// Safetensors headers above this are not checkpoints but corruption.
const MAX_HEADER_BYTES: u64 = 100 * 1024 * 1024;

pub struct Weights {
    tensors: HashMap<String, (Array, PathBuf)>,
    model_dir: PathBuf,
    /// Per-layer quantization where the checkpoint itself says (GGUF types differ per tensor);
    /// layers not named here use `config.json`'s.
    quantization: HashMap<String, Quantization>,
    residency: Residency,
}

/// Which of the checkpoint's tensors this process reads into memory.
#[derive(Clone)]
pub enum Residency {
    /// Every tensor, read when the checkpoint is loaded.
    All,
    /// A pipeline rank's: the tensors another rank's layers use are never read; left lazy, they
    /// cost nothing until evaluated, and they never are.
    Layers(LayerShare),
    /// A tensor-parallel rank's: each tensor is read as it is taken, and a split one is cut to
    /// this rank's slice first, so no more than one whole tensor is in memory at a time.
    Slices(TensorShard),
}

impl Weights {
    /// The checkpoint's `*.safetensors` in `model_dir` ([`corral_ipc::weight_files`]); `quantization` names the layers whose quantization
    /// differs from the model-wide one.
    /// `residency` says which tensors are read now, later, or never.
    pub fn load(
        model_dir: &Path,
        quantization: HashMap<String, Quantization>,
        residency: Residency,
    ) -> Result<Self, ModelError> {
        let files = safetensors_files(model_dir)?;
        let mut tensors = HashMap::new();
        for file in files {
            check_header(&file)?;
            let arrays =
                Array::load_safetensors(&file).map_err(|error| ModelError::Safetensors {
                    path: file.clone(),
                    message: error.to_string(),
                })?;
            // Materialize now, as mlx-lm does: a loaded worker then holds its weights, and a
            // file that fails to read fails the load rather than the first request. The header
            // was checked above, so a failure here is the read's (I/O, memory), not the file's.
            let held = arrays
                .iter()
                .filter(|(name, _)| residency.read_at_load(name))
                .map(|(_, array)| array);
            mlx_rs::transforms::eval(held).map_err(|source| ModelError::Mlx {
                dir: file.clone(),
                action: "reading the tensors",
                source,
            })?;
            for (name, array) in arrays {
                tensors.insert(name, (array, file.clone()));
            }
        }
        Ok(Self {
            tensors,
            model_dir: model_dir.to_path_buf(),
            quantization,
            residency,
        })
    }

    /// Tensors already loaded and materialized from `source`, with each quantized layer's
    /// quantization by its prefix (`model.layers.0.mlp.up_proj`).
    pub fn from_loaded(
        tensors: HashMap<String, Array>,
        source: &Path,
        quantization: HashMap<String, Quantization>,
    ) -> Self {
        Self {
            tensors: tensors
                .into_iter()
                .map(|(name, array)| (name, (array, source.to_path_buf())))
                .collect(),
            model_dir: source.to_path_buf(),
            quantization,
            residency: Residency::All,
        }
    }

    /// The quantization the checkpoint declares for the layer at `prefix`, if it does.
    pub fn quantization_of(&self, prefix: &str) -> Option<Quantization> {
        self.quantization.get(prefix).copied()
    }

    /// A tensor's shape, if present, leaving it in place.
    pub fn shape_of(&self, name: &str) -> Option<Vec<i32>> {
        self.tensors
            .get(name)
            .map(|(array, _)| array.shape().to_vec())
    }

    /// A tensor's type, if present, leaving it in place.
    pub fn dtype_of(&self, name: &str) -> Option<Dtype> {
        self.tensors.get(name).map(|(array, _)| array.dtype())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Removes and returns a tensor, checking its shape.
    pub fn take(&mut self, name: &str, shape: &[i32]) -> Result<Array, ModelError> {
        let (array, file) = self.take_any(name)?;
        if array.shape() != shape {
            return Err(ModelError::Shape {
                name: name.to_owned(),
                path: file,
                found: array.shape().to_vec(),
                expected: shape.to_vec(),
            });
        }
        Ok(array)
    }

    /// Removes and returns a floating-point tensor, checking its shape.
    pub fn take_float(&mut self, name: &str, shape: &[i32]) -> Result<Array, ModelError> {
        let file = self.file_of(name);
        let array = self.take(name, shape)?;
        if !matches!(
            array.dtype(),
            Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16
        ) {
            return Err(ModelError::Dtype {
                name: name.to_owned(),
                path: file,
                found: format!("{:?}", array.dtype()),
                expected: "a floating-point type",
            });
        }
        Ok(array)
    }

    pub fn take_any(&mut self, name: &str) -> Result<(Array, PathBuf), ModelError> {
        let (array, file) = self
            .tensors
            .remove(name)
            .ok_or_else(|| ModelError::MissingTensor {
                name: name.to_owned(),
                dir: self.model_dir.clone(),
            })?;
        if let Residency::Slices(_) = self.residency {
            array.eval().map_err(|source| ModelError::Mlx {
                dir: file.clone(),
                action: "reading a tensor",
                source,
            })?;
        }
        Ok((array, file))
    }

    /// The tensor-parallel group this process holds a slice of every split projection for.
    pub fn tensor_shard(&self) -> Option<&TensorShard> {
        match &self.residency {
            Residency::Slices(shard) => Some(shard),
            _ => None,
        }
    }

    /// Keeps this rank's output rows of the projection at `prefix` (`[.., out, in]`: its
    /// weight, quantization scales and biases, and `[.., out]` bias), the rows laid out as
    /// consecutive `segments` (a fused projection's parts), each split between the ranks.
    /// Nothing happens outside a tensor-parallel group.
    pub fn shard_rows(&mut self, prefix: &str, segments: &[i32]) -> Result<(), ModelError> {
        for part in ["weight", "scales", "biases"] {
            self.shard_axis(&format!("{prefix}.{part}"), -2, segments)?;
        }
        self.shard_axis(&format!("{prefix}.bias"), -1, segments)
    }

    /// Keeps this rank's input columns of the projection at `prefix` (packed ones for a
    /// quantized weight, whose groups split alike). Its bias is one rank's, zero on the others,
    /// so that the sum of the partial outputs adds it once.
    pub fn shard_columns(&mut self, prefix: &str) -> Result<(), ModelError> {
        for part in ["weight", "scales", "biases"] {
            let name = format!("{prefix}.{part}");
            if let Some(&columns) = self.shape_of(&name).as_deref().and_then(<[i32]>::last) {
                self.shard_axis(&name, -1, &[columns])?;
            }
        }
        if self
            .tensor_shard()
            .is_some_and(|shard| !shard.keeps_output_bias())
        {
            self.convert(
                &format!("{prefix}.bias"),
                &format!("{prefix}.bias"),
                "zeroing another rank's bias",
                |bias| mlx_rs::ops::zeros_like(bias),
            )?;
        }
        Ok(())
    }

    /// Keeps this rank's share of `name` along `axis`, laid out as `segments`; absent
    /// tensors are left to the loader to miss.
    pub fn shard_axis(
        &mut self,
        name: &str,
        axis: i32,
        segments: &[i32],
    ) -> Result<(), ModelError> {
        let Some(shard) = self.tensor_shard().cloned() else {
            return Ok(());
        };
        let Some((array, file)) = self.tensors.remove(name) else {
            return Ok(());
        };
        let along = axis.rem_euclid(array.ndim() as i32);
        let length = array.dim(along);
        if segments.iter().sum::<i32>() != length {
            return Err(ModelError::Shape {
                name: name.to_owned(),
                path: file,
                found: array.shape().to_vec(),
                expected: segments.to_vec(),
            });
        }
        let indices = shard.indices(segments).ok_or_else(|| ModelError::Config {
            path: file.clone(),
            message: format!(
                "tensor parallel over {} ranks cannot split {name}: its {length} entries along axis {along} (in parts of {segments:?}) do not divide evenly",
                shard.ranks()
            ),
        })?;
        let count = indices.len() as i32;
        let slice = array
            .take_axis(Array::from_slice(&indices, &[count]), along)
            .and_then(|slice| slice.eval().map(|()| slice))
            .map_err(|source| ModelError::Mlx {
                dir: file.clone(),
                action: "cutting a tensor to this rank's slice",
                source,
            })?;
        self.tensors.insert(name.to_owned(), (slice, file));
        Ok(())
    }

    /// Drops a tensor the model does not use, if present (a tied head's copy).
    pub fn discard(&mut self, name: &str) {
        self.tensors.remove(name);
    }

    /// Keeps only a wrapper checkpoint's text model, under the text model's own names.
    pub fn unwrap_text_model(&mut self, wrapper: &Wrapper) {
        self.tensors = std::mem::take(&mut self.tensors)
            .into_iter()
            .filter_map(|(name, entry)| Some((wrapper.text_name(&name)?, entry)))
            .collect();
    }

    /// The tensors named under `prefix`, moved into a checkpoint of their own without it (a
    /// vision tower's, beside the text model's); `None` when there are none.
    pub fn split_off(&mut self, prefix: &str) -> Option<Self> {
        let names: Vec<String> = self
            .tensors
            .keys()
            .filter(|name| name.starts_with(prefix))
            .cloned()
            .collect();
        if names.is_empty() {
            return None;
        }
        let tensors = names
            .into_iter()
            .filter_map(|name| {
                let entry = self.tensors.remove(&name)?;
                Some((name[prefix.len()..].to_owned(), entry))
            })
            .collect();
        let quantization = self
            .quantization
            .iter()
            .filter_map(|(layer, quantization)| {
                Some((layer.strip_prefix(prefix)?.to_owned(), *quantization))
            })
            .collect();
        Some(Self {
            tensors,
            model_dir: self.model_dir.clone(),
            quantization,
            residency: Residency::All,
        })
    }

    /// Drops every tensor whose name starts with `prefix` (a part of the checkpoint the model
    /// does not run, such as a multi-token-prediction layer).
    pub fn discard_under(&mut self, prefix: &str) {
        self.tensors.retain(|name, _| !name.starts_with(prefix));
    }

    /// The file `name` is read from; the checkpoint's directory (or GGUF file) for a tensor
    /// that is absent or already taken, so that an error always names a path.
    pub fn file_of(&self, name: &str) -> PathBuf {
        self.tensors
            .get(name)
            .map_or_else(|| self.model_dir.clone(), |(_, file)| file.clone())
    }

    /// Tensors no layer asked for, for a warning: checkpoints carry extras (rotary caches).
    pub fn leftover_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.tensors.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Replaces the tensors `sources` by one tensor `target` that stacks them along a new first
    /// axis, as mlx-lm's `sanitize` stacks one tensor per expert.
    pub fn stack(&mut self, sources: &[String], target: &str) -> Result<(), ModelError> {
        let mut parts = Vec::with_capacity(sources.len());
        let mut file = self.model_dir.clone();
        for source in sources {
            let (array, path) = self.take_any(source)?;
            parts.push(array);
            file = path;
        }
        let stacked = mlx_rs::ops::stack(&parts, 0)
            .and_then(|stacked| self.materialize(target, stacked))
            .map_err(|source| ModelError::Mlx {
                dir: file.clone(),
                action: "stacking the experts' tensors",
                source,
            })?;
        self.tensors.insert(target.to_owned(), (stacked, file));
        Ok(())
    }

    /// Replaces the tensor `from`, if present, by `convert` of it under the name `to`.
    pub fn convert(
        &mut self,
        from: &str,
        to: &str,
        action: &'static str,
        convert: impl FnOnce(&Array) -> Result<Array, mlx_rs::error::Exception>,
    ) -> Result<(), ModelError> {
        let Some((array, file)) = self.tensors.remove(from) else {
            return Ok(());
        };
        let converted = convert(&array)
            .and_then(|converted| self.materialize(to, converted))
            .map_err(|source| ModelError::Mlx {
                dir: file.clone(),
                action,
                source,
            })?;
        self.tensors.insert(to.to_owned(), (converted, file));
        Ok(())
    }

    /// Replaces the tensor `from`, if present, by the tensors `convert` makes of it, named `to`.
    pub fn convert_into<const N: usize>(
        &mut self,
        from: &str,
        to: [&str; N],
        action: &'static str,
        convert: impl FnOnce(&Array) -> Result<[Array; N], mlx_rs::error::Exception>,
    ) -> Result<(), ModelError> {
        let Some((array, file)) = self.tensors.remove(from) else {
            return Ok(());
        };
        let converted = convert(&array)
            .and_then(|parts| {
                if self.holds(from) {
                    mlx_rs::transforms::eval(&parts)?;
                }
                Ok(parts)
            })
            .map_err(|source| ModelError::Mlx {
                dir: file.clone(),
                action,
                source,
            })?;
        for (name, part) in to.into_iter().zip(converted) {
            self.tensors.insert(name.to_owned(), (part, file.clone()));
        }
        Ok(())
    }

    /// Whether this rank keeps the tensor `name` (every tensor, outside a pipeline).
    fn holds(&self, name: &str) -> bool {
        self.residency.read_at_load(name)
    }

    /// `array`, computed now where this rank keeps the tensor `name`, so that its sources'
    /// memory can go; left lazy, and so never read, where another rank runs it.
    fn materialize(&self, name: &str, array: Array) -> Result<Array, mlx_rs::error::Exception> {
        if self.holds(name) {
            array.eval()?;
        }
        Ok(array)
    }

    /// Renames a tensor, if present.
    pub fn rename(&mut self, from: &str, to: &str) {
        if let Some(entry) = self.tensors.remove(from) {
            self.tensors.insert(to.to_owned(), entry);
        }
    }

    /// Renames a layer's tensors (`{from}.weight`, its bias, a quantized layer's scales and
    /// biases) and its declared quantization to `to`, as mlx-lm's `sanitize` renames layers.
    pub fn rename_layer(&mut self, from: &str, to: &str) {
        for part in ["weight", "bias", "scales", "biases"] {
            self.rename(&format!("{from}.{part}"), &format!("{to}.{part}"));
        }
        if let Some(quantization) = self.quantization.remove(from) {
            self.quantization.insert(to.to_owned(), quantization);
        }
    }

    /// Replaces `source`, whose axis `axis` interleaves two tensors row by row (even rows, odd
    /// rows), by the two, named `targets`; absent `source` changes nothing.
    pub fn deinterleave(
        &mut self,
        source: &str,
        axis: usize,
        targets: [&str; 2],
    ) -> Result<(), ModelError> {
        let Some((array, file)) = self.tensors.remove(source) else {
            return Ok(());
        };
        let mut shape = array.shape().to_vec();
        let rows = shape.get(axis).copied().unwrap_or(0);
        if rows % 2 != 0 {
            return Err(ModelError::Shape {
                name: source.to_owned(),
                path: file,
                found: shape,
                expected: vec![],
            });
        }
        shape[axis] = rows / 2;
        shape.insert(axis + 1, 2);
        let held = self.holds(source);
        let split = |parity: i32| -> Result<Array, mlx_rs::error::Exception> {
            let pairs = array.reshape(&shape)?;
            let part = pairs
                .take_axis(Array::from_int(parity), (axis + 1) as i32)?
                .contiguous()?;
            if held {
                part.eval()?;
            }
            Ok(part)
        };
        for (parity, target) in targets.into_iter().enumerate() {
            let part = split(parity as i32).map_err(|source| ModelError::Mlx {
                dir: file.clone(),
                action: "splitting interleaved expert tensors",
                source,
            })?;
            self.tensors.insert(target.to_owned(), (part, file.clone()));
        }
        Ok(())
    }

    /// An MLX failure while preparing this checkpoint's tensors.
    pub fn mlx_error(&self, action: &'static str, source: mlx_rs::error::Exception) -> ModelError {
        ModelError::Mlx {
            dir: self.model_dir.clone(),
            action,
            source,
        }
    }

    pub fn total_bytes(&self) -> usize {
        self.tensors
            .iter()
            .filter(|(name, _)| self.holds(name))
            .map(|(_, (array, _))| array.nbytes())
            .sum()
    }
}

impl Residency {
    fn read_at_load(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::Layers(share) => share.holds_tensor(name),
            Self::Slices(_) => false,
        }
    }
}

fn safetensors_files(model_dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let files = corral_ipc::weight_files(model_dir).map_err(|source| ModelError::Io {
        path: model_dir.to_path_buf(),
        source,
    })?;
    if files.is_empty() {
        return Err(ModelError::NoWeights {
            dir: model_dir.to_path_buf(),
        });
    }
    Ok(files)
}

/// One tensor as a safetensors header declares it.
pub struct TensorHeader {
    /// The safetensors dtype: `F32`, `BF16`, `U32`, ...
    pub dtype: String,
    pub shape: Vec<u64>,
}

impl TensorHeader {
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// The tensors the checkpoint's files in `model_dir` declare, by name, without reading them.
pub fn tensor_headers(model_dir: &Path) -> Result<HashMap<String, TensorHeader>, ModelError> {
    let mut tensors = HashMap::new();
    for file in safetensors_files(model_dir)? {
        let corrupt = |message: String| ModelError::Safetensors {
            path: file.clone(),
            message,
        };
        for (name, entry) in check_header(&file)? {
            let dtype = entry.get("dtype").and_then(serde_json::Value::as_str);
            let shape: Option<Vec<u64>> = entry
                .get("shape")
                .and_then(serde_json::Value::as_array)
                .and_then(|dims| dims.iter().map(serde_json::Value::as_u64).collect());
            let (Some(dtype), Some(shape)) = (dtype, shape) else {
                return Err(corrupt(format!("tensor {name} has no dtype or shape")));
            };
            let dtype = dtype.to_owned();
            tensors.insert(name, TensorHeader { dtype, shape });
        }
    }
    Ok(tensors)
}

/// Why MLX cannot compute one of the checkpoint's quantized layers, from its headers alone, for
/// `describe` (the load refuses the same layers): nvfp4 experts with a global scale each, which
/// mlx-lm reads from the `{layer}.global_scale` tensor alone, or `uint8` scales spread over
/// packed words as no float mode spreads them. Names the tensor and the mode.
pub fn unrunnable_quantization(model_dir: &Path) -> Result<Option<String>, ModelError> {
    let tensors = tensor_headers(model_dir)?;
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort_unstable();
    for name in names {
        if let Some(layer) = name.strip_suffix(".global_scale")
            && tensors.contains_key(&format!("{layer}.scales"))
        {
            return Ok(Some(format!("{name}: nvfp4 {GLOBAL_SCALE_UNSUPPORTED}")));
        }
        let Some(layer) = name.strip_suffix(".scales") else {
            continue;
        };
        let (Some(weight), scales) = (tensors.get(&format!("{layer}.weight")), &tensors[name])
        else {
            continue;
        };
        if scales.dtype != "U8" || weight.dtype != "U32" {
            continue;
        }
        let words = weight.shape.last().copied().unwrap_or(0);
        let groups = scales.shape.last().copied().unwrap_or(0);
        let mode = (groups > 0 && words % groups == 0)
            .then(|| Quantization::float_mode_of(words / groups))
            .flatten();
        if mode.is_none() {
            return Ok(Some(format!(
                "{name}: uint8 scales, one per {words}/{groups} packed words, match no mode MLX has \
                 (mxfp4, mxfp8, nvfp4)"
            )));
        }
    }
    Ok(None)
}

/// Validates the header and that every tensor's bytes lie inside the file; returns the header's
/// tensor entries.
fn check_header(path: &Path) -> Result<serde_json::Map<String, serde_json::Value>, ModelError> {
    let corrupt = |message: String| ModelError::Safetensors {
        path: path.to_path_buf(),
        message,
    };
    let io = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let mut len_bytes = [0u8; 8];
    file.read_exact(&mut len_bytes).map_err(|_| {
        corrupt(format!(
            "file of {file_len} bytes is too short for a header"
        ))
    })?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_HEADER_BYTES || 8 + header_len > file_len {
        return Err(corrupt(format!(
            "header length {header_len} does not fit the file of {file_len} bytes"
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header).map_err(io)?;
    let mut entries: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|error| corrupt(format!("bad header: {error}")))?;
    entries.remove("__metadata__");
    let data_len = file_len - 8 - header_len;
    for (name, entry) in &entries {
        let end = entry
            .get("data_offsets")
            .and_then(|offsets| offsets.get(1))
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| corrupt(format!("tensor {name} has no data_offsets")))?;
        if end > data_len {
            return Err(corrupt(format!(
                "tensor {name} ends at byte {end} of the data, but the file holds only {data_len}: truncated"
            )));
        }
    }
    Ok(entries)
}
