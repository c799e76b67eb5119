//! What loading a model can fail with, naming the file or directory.

use std::path::PathBuf;

use mlx_rs::error::Exception;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("{dir}: no *.safetensors weights")]
    NoWeights { dir: PathBuf },
    #[error("{path}: corrupt safetensors: {message}")]
    Safetensors { path: PathBuf, message: String },
    #[error("{dir}: tensor {name} is missing")]
    MissingTensor { name: String, dir: PathBuf },
    #[error("{path}: tensor {name} has shape {found:?}, expected {expected:?}")]
    Shape {
        name: String,
        path: PathBuf,
        found: Vec<i32>,
        expected: Vec<i32>,
    },
    #[error("{path}: tensor {name} is {found}, expected {expected}")]
    Dtype {
        name: String,
        path: PathBuf,
        found: String,
        expected: &'static str,
    },
    #[error("{path}: bad quantization: {message}")]
    Quantization { path: PathBuf, message: String },
    #[error("{dir}: MLX failed while {action}: {source}")]
    Mlx {
        dir: PathBuf,
        action: &'static str,
        source: Exception,
    },
}
