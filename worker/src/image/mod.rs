//! Images as a model's processor prepares them, from the bytes a client sent: decoded
//! (`decode.rs`: PNG, JPEG, WebP, GIF's first frame, as Pillow opens them and transformers makes
//! them RGB), then resized, normalized and cut into patches by the processor the model's files
//! name (`processor.rs` reads which; `qwen2_vl.rs`: Qwen2-VL's through Qwen3.5's; `gemma3.rs`:
//! Gemma 3's; `gemma4.rs`: Gemma 4's; `pixtral.rs`: Mistral 3's; `llama_cpp_size.rs`: llama.cpp's sizing for a
//! GGUF's projector).

mod colour_key;
mod decode;
mod gemma3;
mod gemma4;
mod jpeg;
mod llama_cpp_size;
mod pixtral;
mod processor;
mod qwen2_vl;
mod resample;
mod scaling;
mod size;

pub use decode::decode;
pub use processor::{ImageProcessor, Patches};
pub use size::{MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE};

/// Why an image cannot be given to the model; the caller names where the image was.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("not an image in a format corral reads (PNG, JPEG, WebP or GIF)")]
    UnknownFormat,
    #[error("cannot decode the image: {0}")]
    Undecodable(String),
    #[error(
        "the image is {width}x{height} pixels, over the {MAX_IMAGE_SIDE}-pixel side or \
         {MAX_IMAGE_PIXELS}-pixel limit"
    )]
    TooLarge { width: u32, height: u32 },
    #[error("the image's aspect ratio is {ratio:.1}, over the processor's limit of 200")]
    AspectRatio { ratio: f64 },
    #[error("{path}: {message}")]
    ProcessorConfig {
        path: std::path::PathBuf,
        message: String,
    },
}
