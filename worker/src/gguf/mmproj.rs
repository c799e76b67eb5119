//! llama.cpp's vision projectors (`mmproj*.gguf`, `general.architecture` `clip`): a tower kept
//! in a file of its own beside the text model's GGUF, as llama.cpp's converter writes it
//! (`convert_hf_to_gguf.py --mmproj`), LM Studio and the GGUF repositories ship it and Ollama
//! keeps it in a projector layer. Its tensors take transformers' names for the tower corral runs
//! (`clip.projector_type`: so far `qwen3vl_merger`, Qwen3-VL's through Qwen3.6's), its
//! metadata gives the tower's sizes and the processor's normalization, and the images are
//! prepared within llama.cpp's limits for that tower, its processor's config not being there.

use std::path::Path;

use serde_json::json;
use tokenizers::Tokenizer;

use super::{Choices, GgufError, GgufHeader, weights};
use crate::image::ImageProcessor;
use crate::model::{ModelError, VisionTower, Weights};

/// A projector's tower and the processor its images are prepared by.
pub struct Projector {
    pub tower: VisionTower,
    pub processor: ImageProcessor,
}

#[derive(Debug, thiserror::Error)]
pub enum ProjectorError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("{path}: a projector of type {kind:?}, not one corral runs (it runs qwen3vl_merger)")]
    Unsupported {
        path: std::path::PathBuf,
        kind: String,
    },
    #[error("{path}: {message}")]
    Invalid {
        path: std::path::PathBuf,
        message: String,
    },
}

/// The projector's type, where corral runs it.
fn kind(header: &GgufHeader) -> Result<String, ProjectorError> {
    if header.architecture() != Some("clip") {
        return Err(ProjectorError::Invalid {
            path: header.path.clone(),
            message: format!(
                "general.architecture is {:?}, not a projector's clip",
                header.architecture()
            ),
        });
    }
    let kind = header.string("clip.projector_type").unwrap_or_default();
    if kind != "qwen3vl_merger" {
        return Err(ProjectorError::Unsupported {
            path: header.path.clone(),
            kind: kind.to_owned(),
        });
    }
    Ok(kind.to_owned())
}

/// What the projector at `path` takes while it encodes one image of at most a megapixel, each
/// activation `element_bytes` wide (`describe`'s reserve for images), from its header alone.
pub fn activation_bytes(path: &Path, element_bytes: u64) -> Result<u64, ProjectorError> {
    const MEGAPIXEL: u64 = 1 << 20;
    let header = GgufHeader::read(path)?;
    kind(&header)?;
    let sizes = Sizes::read(&header)?;
    let merged = (sizes.patch * sizes.merge) as u64;
    let pixels = (4096 * merged * merged).min(MEGAPIXEL);
    Ok(crate::model::projector_activation_bytes(
        sizes.vision_config,
        pixels,
        element_bytes,
    ))
}

/// A Qwen-VL projector's sizes, from its metadata.
struct Sizes {
    patch: usize,
    merge: usize,
    depth: usize,
    /// As transformers' `Qwen3_5VisionConfig` has them.
    vision_config: serde_json::Value,
}

impl Sizes {
    fn read(header: &GgufHeader) -> Result<Self, ProjectorError> {
        let integer = |key: &str| integer(header, key);
        let patch = integer("clip.vision.patch_size")?;
        let merge = integer("clip.vision.spatial_merge_size").unwrap_or(2);
        let depth = integer("clip.vision.block_count")?;
        let positions = header
            .tensors
            .iter()
            .find(|tensor| tensor.name == "v.position_embd.weight")
            .and_then(|tensor| tensor.dims.get(1).copied())
            .ok_or_else(|| invalid(header, "no v.position_embd.weight".into()))?;
        let vision_config = json!({
            "depth": depth,
            "hidden_size": integer("clip.vision.embedding_length")?,
            "intermediate_size": integer("clip.vision.feed_forward_length")?,
            "num_heads": integer("clip.vision.attention.head_count")?,
            "patch_size": patch,
            "spatial_merge_size": merge,
            "temporal_patch_size": 2,
            "out_hidden_size": integer("clip.vision.projection_dim")?,
            "num_position_embeddings": positions,
        });
        Ok(Self {
            patch,
            merge,
            depth,
            vision_config,
        })
    }
}

fn invalid(header: &GgufHeader, message: String) -> ProjectorError {
    ProjectorError::Invalid {
        path: header.path.clone(),
        message,
    }
}

fn integer(header: &GgufHeader, key: &str) -> Result<usize, ProjectorError> {
    header
        .get(key)
        .and_then(|value| value.as_u64())
        .and_then(|value| usize::try_from(value).ok())
        .ok_or_else(|| invalid(header, format!("{key} is missing or not an integer")))
}

/// The projector at `path` for a text model whose tokenizer is `tokenizer`.
pub fn load(path: &Path, tokenizer: &Tokenizer) -> Result<Projector, ProjectorError> {
    let header = GgufHeader::read(path)?;
    kind(&header)?;
    let triple = |key: &str| -> Result<[f32; 3], ProjectorError> {
        let values: Option<Vec<f32>> = header
            .get(key)
            .and_then(|value| value.as_array())
            .and_then(|values| {
                values
                    .iter()
                    .map(|value| value.as_f64())
                    .collect::<Option<Vec<f64>>>()
            })
            .map(|values| values.into_iter().map(|value| value as f32).collect());
        values
            .and_then(|values| <[f32; 3]>::try_from(values).ok())
            .ok_or_else(|| invalid(&header, format!("{key} must be three numbers")))
    };
    let sizes = Sizes::read(&header)?;
    let mut tensors = weights::load(&header, Choices::default())?;
    qwen3vl_names(&mut tensors, sizes.depth)?;
    let image_token = tokenizer.token_to_id("<|image_pad|>").ok_or_else(|| {
        invalid(
            &header,
            "the text model's vocabulary has no <|image_pad|>".into(),
        )
    })?;
    let tower =
        VisionTower::qwen3_5_from_projector(sizes.vision_config, &mut tensors, image_token, path)?;
    let leftovers = tensors.leftover_names();
    if !leftovers.is_empty() {
        tracing::warn!(projector = %path.display(), tensors = ?leftovers, "ignoring projector tensors no layer uses");
    }
    let processor = ImageProcessor::qwen_vl_projector(
        sizes.patch,
        sizes.merge,
        triple("clip.vision.image_mean")?,
        triple("clip.vision.image_std")?,
    );
    Ok(Projector { tower, processor })
}

/// llama.cpp's names for Qwen3-VL's tower as transformers names it under `model.visual.`: the
/// patch projection's two frames (`v.patch_embd.weight` and `.weight.1`) stacked back into
/// one, the blocks' and the merger's layers renamed.
fn qwen3vl_names(tensors: &mut Weights, depth: usize) -> Result<(), ModelError> {
    let frames = [
        "v.patch_embd.weight".to_owned(),
        "v.patch_embd.weight.1".to_owned(),
    ];
    tensors.stack(&frames, "patch_embed.stacked")?;
    // `[frames, out, in, rows, columns]` to the convolution's `[out, in, frames, rows, columns]`.
    tensors.convert(
        "patch_embed.stacked",
        "patch_embed.proj.weight",
        "ordering the patch projection's frames",
        |stacked| stacked.transpose_axes(&[1, 2, 0, 3, 4]),
    )?;
    tensors.rename("v.patch_embd.bias", "patch_embed.proj.bias");
    tensors.rename("v.position_embd.weight", "pos_embed.weight");
    for block in 0..depth {
        for (gguf, transformers) in [
            ("ln1", "norm1"),
            ("ln2", "norm2"),
            ("attn_qkv", "attn.qkv"),
            ("attn_out", "attn.proj"),
            ("ffn_up", "mlp.linear_fc1"),
            ("ffn_down", "mlp.linear_fc2"),
        ] {
            tensors.rename_layer(
                &format!("v.blk.{block}.{gguf}"),
                &format!("blocks.{block}.{transformers}"),
            );
        }
    }
    tensors.rename_layer("v.post_ln", "merger.norm");
    tensors.rename_layer("mm.0", "merger.linear_fc1");
    tensors.rename_layer("mm.2", "merger.linear_fc2");
    Ok(())
}
