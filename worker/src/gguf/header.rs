//! The GGUF header: metadata and tensor infos, read and checked before MLX touches the file.
//!
//! MLX's own loader trusts the file; a truncated download or a tensor offset past the end would
//! fail inside it, or read past a mapping. Everything it will read is checked here first: every
//! length against the bytes left in the file, every tensor's data against the file's end, every
//! tensor type against those the worker serves.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ggml_type::GgmlType;

const MAGIC: &[u8; 4] = b"GGUF";
/// For the error that refuses the others.
const SERVED_TYPES: &str = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4";
const DEFAULT_ALIGNMENT: u64 = 32;
/// More dimensions than ggml has (4) is corruption, not a model.
const MAX_DIMS: u32 = 4;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a usable GGUF file: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::Uint(value) => Some(value),
            Self::Int(value) => u64::try_from(value).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::Float(value) => Some(value),
            Self::Uint(value) => Some(value as f64),
            Self::Int(value) => Some(value as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(value) => Some(value),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(value) => Some(value),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Self::Array(values) => Some(values),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the contiguous axis, the reverse of MLX's shape.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// The file that holds the data: the model's own, or one part of a split model.
    pub file: Arc<Path>,
    /// From the start of `file`.
    pub start: u64,
    pub bytes: u64,
}

impl TensorInfo {
    /// The shape as MLX reports it (row-major, outermost axis first).
    pub fn shape(&self) -> Vec<i32> {
        self.dims.iter().rev().map(|&dim| dim as i32).collect()
    }
}

/// One model's header. A split model (llama.cpp's `gguf-split`: `NAME-00001-of-0000N.gguf`, each
/// part with `split.no` and `split.count`) is read as one: `path` is its first part, which holds
/// the metadata, `tensors` come from every part, `file_bytes` counts them all.
pub struct GgufHeader {
    pub path: PathBuf,
    pub metadata: HashMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    pub file_bytes: u64,
}

impl fmt::Debug for GgufHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufHeader")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

impl GgufHeader {
    /// Reads and checks the header of `path`, and of the other parts when it is the first part
    /// of a split model: every tensor's data lies inside its file.
    pub fn read(path: &Path) -> Result<Self, GgufError> {
        let mut header = Self::read_one(path)?;
        let Some(parts) = header.split_count()? else {
            return Ok(header);
        };
        let number = header.split_number()?;
        if number != 0 {
            return Err(header.invalid(format!(
                "part {} of a model split in {parts}; give its first part",
                number + 1
            )));
        }
        for number in 1..parts {
            let part_path = split_part_path(path, number, parts).ok_or_else(|| {
                header.invalid(format!(
                    "split in {parts} parts (split.count), but the name does not end in \
                     -00001-of-{parts:05}.gguf, so the other parts cannot be found"
                ))
            })?;
            if !part_path.exists() {
                return Err(header.invalid(format!(
                    "part {} of {parts} is missing: {}",
                    number + 1,
                    part_path.display()
                )));
            }
            let part = Self::read_one(&part_path)?;
            if part.split_number()? != number || part.split_count()? != Some(parts) {
                return Err(part.invalid(format!(
                    "expected part {} of {parts} (split.no {number}, split.count {parts})",
                    number + 1
                )));
            }
            header.tensors.extend(part.tensors);
            header.file_bytes += part.file_bytes;
        }
        if let Some(count) = header.get("split.tensors.count").and_then(Value::as_u64)
            && count != header.tensors.len() as u64
        {
            return Err(header.invalid(format!(
                "split.tensors.count says {count} tensors, the {parts} parts hold {}",
                header.tensors.len()
            )));
        }
        Ok(header)
    }

    /// One file's header, its tensors located in it.
    fn read_one(path: &Path) -> Result<Self, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let file_bytes = file.metadata().map_err(io)?.len();
        let mut reader = Reader {
            input: BufReader::with_capacity(1 << 20, file),
            position: 0,
            file_bytes,
            file: Arc::from(path),
        };
        reader
            .header()
            .map(|(metadata, tensors)| Self {
                path: path.to_path_buf(),
                metadata,
                tensors,
                file_bytes,
            })
            .map_err(|message| GgufError::Invalid {
                path: path.to_path_buf(),
                message,
            })
    }

    /// `split.count` when it says more than one part.
    fn split_count(&self) -> Result<Option<u64>, GgufError> {
        match self.get("split.count") {
            None => Ok(None),
            Some(value) => match value.as_u64() {
                Some(0 | 1) => Ok(None),
                Some(count) if count < 100_000 => Ok(Some(count)),
                _ => Err(self.invalid(format!("split.count {value:?}"))),
            },
        }
    }

    /// `split.no`, counted from 0.
    fn split_number(&self) -> Result<u64, GgufError> {
        match self.get("split.no") {
            None => Ok(0),
            Some(value) => value
                .as_u64()
                .ok_or_else(|| self.invalid(format!("split.no {value:?}"))),
        }
    }

    /// The tensor `name`'s values, for the few small F32 tensors that carry hyperparameters
    /// (Phi-3's longrope factors).
    pub fn read_f32(&self, name: &str) -> Result<Option<Vec<f32>>, GgufError> {
        let Some(tensor) = self.tensors.iter().find(|tensor| tensor.name == name) else {
            return Ok(None);
        };
        if tensor.ggml_type != GgmlType::F32 {
            return Err(self.invalid(format!("tensor {name} is {}, not F32", tensor.ggml_type)));
        }
        let io = |source| GgufError::Io {
            path: tensor.file.to_path_buf(),
            source,
        };
        let mut bytes = vec![0u8; tensor.bytes as usize];
        std::os::unix::fs::FileExt::read_exact_at(
            &File::open(&tensor.file).map_err(io)?,
            &mut bytes,
            tensor.start,
        )
        .map_err(io)?;
        Ok(Some(
            bytes
                .chunks_exact(4)
                .map(|chunk| f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]))
                .collect(),
        ))
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    pub fn string(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    pub fn architecture(&self) -> Option<&str> {
        self.string("general.architecture")
    }

    /// The first of the layers past the trunk that the converter appends for multi-token
    /// prediction (`nextn_predict_layers` of `block_count`), where it appended any.
    pub fn first_prediction_layer(&self) -> Option<u64> {
        let arch = self.architecture()?;
        let count = |key: &str| self.get(&format!("{arch}.{key}")).and_then(Value::as_u64);
        let (blocks, predictors) = (count("block_count")?, count("nextn_predict_layers")?);
        (predictors > 0).then(|| blocks.saturating_sub(predictors))
    }

    /// Whether the tensor `name` belongs to a multi-token-prediction layer.
    pub fn in_prediction_layer(&self, name: &str) -> bool {
        let Some(first) = self.first_prediction_layer() else {
            return false;
        };
        name.strip_prefix("blk.")
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(layer, _)| layer.parse::<u64>().ok())
            .is_some_and(|layer| layer >= first)
    }

    /// An error naming this file.
    pub fn invalid(&self, message: impl Into<String>) -> GgufError {
        GgufError::Invalid {
            path: self.path.clone(),
            message: message.into(),
        }
    }

    /// Fails on the first tensor of a type the worker does not serve, naming it.
    pub fn check_types(&self) -> Result<(), GgufError> {
        // The types the worker serves are those `blocks` reads without inflating them; the
        // others (the 1-3-bit IQ and ternary types, ggml's intermediates) are refused by name.
        match self
            .tensors
            .iter()
            .find(|t| super::blocks::route(t.ggml_type).is_none())
        {
            Some(tensor) => Err(self.invalid(format!(
                "tensor {} is {}; corral serves {SERVED_TYPES} tensors",
                tensor.name, tensor.ggml_type
            ))),
            None => Ok(()),
        }
    }

    /// The tensor types by how many bytes each holds, largest first: `Q4_1+Q8_0+F32`.
    pub fn quantization_summary(&self) -> String {
        let mut bytes: HashMap<GgmlType, u64> = HashMap::new();
        for tensor in &self.tensors {
            *bytes.entry(tensor.ggml_type).or_default() += tensor.bytes;
        }
        let mut types: Vec<(GgmlType, u64)> = bytes.into_iter().collect();
        types.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        types
            .iter()
            .map(|(ggml_type, _)| ggml_type.to_string())
            .collect::<Vec<_>>()
            .join("+")
    }
}

/// The path of part `number` (from 0) of `parts`, named as the first part `first` is:
/// `NAME-00001-of-00003.gguf` → `NAME-0000{number + 1}-of-00003.gguf`.
pub fn split_part_path(first: &Path, number: u64, parts: u64) -> Option<PathBuf> {
    let name = first.file_name()?.to_str()?;
    let suffix = format!("-00001-of-{parts:05}.gguf");
    let stem = name.strip_suffix(&suffix)?;
    Some(first.with_file_name(format!("{stem}-{:05}-of-{parts:05}.gguf", number + 1)))
}

struct Reader {
    input: BufReader<File>,
    position: u64,
    file_bytes: u64,
    file: Arc<Path>,
}

type Metadata = HashMap<String, Value>;

impl Reader {
    fn header(&mut self) -> Result<(Metadata, Vec<TensorInfo>), String> {
        let mut magic = [0u8; 4];
        self.bytes(&mut magic)?;
        if &magic != MAGIC {
            return Err(format!("starts with {magic:02x?}, not the GGUF magic"));
        }
        let version = self.u32()?;
        if !(2..=3).contains(&version) {
            return Err(format!("GGUF version {version} (supported: 2 and 3)"));
        }
        let tensor_count = self.u64()?;
        let kv_count = self.u64()?;
        let mut metadata = HashMap::new();
        for _ in 0..kv_count {
            let key = self.string()?;
            let kind = self.u32()?;
            let value = self
                .value(kind)
                .map_err(|message| format!("metadata {key}: {message}"))?;
            metadata.insert(key, value);
        }
        let mut tensors = Vec::new();
        for _ in 0..tensor_count {
            tensors.push(self.tensor_info()?);
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(value) => value
                .as_u64()
                .filter(|a| a.is_power_of_two())
                .ok_or_else(|| format!("general.alignment {value:?} is not a power of two"))?,
        };
        let data_start = self.position.next_multiple_of(alignment);
        for tensor in &mut tensors {
            let offset = tensor.start;
            if !offset.is_multiple_of(alignment) {
                return Err(format!(
                    "tensor {} at offset {offset} is not aligned to {alignment}",
                    tensor.name
                ));
            }
            tensor.start = data_start
                .checked_add(offset)
                .ok_or_else(|| format!("tensor {} has offset {offset}", tensor.name))?;
            let end = tensor.start.saturating_add(tensor.bytes);
            if end > self.file_bytes {
                return Err(format!(
                    "tensor {} ends at byte {end}, past the end of the file ({} bytes): truncated or corrupt",
                    tensor.name, self.file_bytes
                ));
            }
        }
        Ok((metadata, tensors))
    }

    fn tensor_info(&mut self) -> Result<TensorInfo, String> {
        let name = self.string()?;
        let n_dims = self.u32()?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(format!("tensor {name} has {n_dims} dimensions"));
        }
        let dims = (0..n_dims)
            .map(|_| self.u64())
            .collect::<Result<Vec<_>, _>>()?;
        let ggml_type = GgmlType(self.u32()?);
        let start = self.u64()?;
        let values = dims
            .iter()
            .try_fold(1u64, |count, &dim| {
                count
                    .checked_mul(dim)
                    .filter(|_| i32::try_from(dim).is_ok())
            })
            .ok_or_else(|| format!("tensor {name} has dimensions {dims:?}"))?;
        let bytes = ggml_type.bytes_for(values).ok_or_else(|| {
            format!("tensor {name}: {values} values of {ggml_type} are not a whole number of blocks (or the type is unknown)")
        })?;
        if ggml_type
            .block_values()
            .is_some_and(|block| !dims[0].is_multiple_of(block))
        {
            return Err(format!(
                "tensor {name}: rows of {} values do not split into {ggml_type} blocks",
                dims[0]
            ));
        }
        Ok(TensorInfo {
            name,
            dims,
            ggml_type,
            file: self.file.clone(),
            start,
            bytes,
        })
    }

    fn value(&mut self, kind: u32) -> Result<Value, String> {
        Ok(match kind {
            0 => Value::Uint(self.array::<1>()?[0].into()),
            1 => Value::Int(i8::from_le_bytes(self.array::<1>()?).into()),
            2 => Value::Uint(u16::from_le_bytes(self.array::<2>()?).into()),
            3 => Value::Int(i16::from_le_bytes(self.array::<2>()?).into()),
            4 => Value::Uint(self.u32()?.into()),
            5 => Value::Int(i32::from_le_bytes(self.array::<4>()?).into()),
            6 => Value::Float(f32::from_le_bytes(self.array::<4>()?).into()),
            7 => Value::Bool(self.array::<1>()?[0] != 0),
            8 => Value::String(self.string()?),
            9 => {
                let element_kind = self.u32()?;
                let count = self.u64()?;
                // Each element takes at least one byte: a count beyond the file is corruption,
                // caught before allocating for it.
                if count > self.remaining() {
                    return Err(format!(
                        "array of {count} elements is longer than the rest of the file"
                    ));
                }
                let mut values = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    values.push(self.value(element_kind)?);
                }
                Value::Array(values)
            }
            10 => Value::Uint(self.u64()?),
            11 => Value::Int(i64::from_le_bytes(self.array::<8>()?)),
            12 => Value::Float(f64::from_le_bytes(self.array::<8>()?)),
            other => return Err(format!("unknown value type {other}")),
        })
    }

    fn remaining(&self) -> u64 {
        self.file_bytes.saturating_sub(self.position)
    }

    fn string(&mut self) -> Result<String, String> {
        let len = self.u64()?;
        if len > self.remaining() {
            return Err(format!(
                "a string of {len} bytes at offset {} runs past the end of the file ({} bytes): truncated or corrupt",
                self.position, self.file_bytes
            ));
        }
        let mut bytes = vec![0u8; len as usize];
        self.bytes(&mut bytes)?;
        // Token texts of byte-level vocabularies are valid UTF-8; anything else is damage.
        String::from_utf8(bytes)
            .map_err(|_| format!("a string before offset {} is not UTF-8", self.position))
    }

    fn u32(&mut self) -> Result<u32, String> {
        self.array::<4>().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, String> {
        self.array::<8>().map(u64::from_le_bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut bytes = [0u8; N];
        self.bytes(&mut bytes)?;
        Ok(bytes)
    }

    fn bytes(&mut self, buffer: &mut [u8]) -> Result<(), String> {
        self.input.read_exact(buffer).map_err(|error| {
            if error.kind() == std::io::ErrorKind::UnexpectedEof {
                format!(
                    "the header ends early, at offset {} of {} bytes: truncated",
                    self.position, self.file_bytes
                )
            } else {
                format!("reading at offset {}: {error}", self.position)
            }
        })?;
        self.position += buffer.len() as u64;
        Ok(())
    }
}
