//! llama.cpp's vision projectors (`mmproj*.gguf`, `general.architecture` `clip`): a tower kept
//! in a file of its own beside the text model's GGUF, as llama.cpp's converter writes it
//! (`convert_hf_to_gguf.py --mmproj`), LM Studio and the GGUF repositories ship it and Ollama
//! keeps it in a projector layer. Its tensors take transformers' names for the tower corral runs
//! (`clip.projector_type`: `qwen3vl_merger`, Qwen3-VL's through Qwen3.6's, `gemma3`, `gemma4v`
//! and `pixtral`, Mistral 3's), its
//! metadata gives the tower's sizes and the processor's normalization, and the images are
//! prepared within llama.cpp's limits for that tower, its processor's config not being there
//! (Gemma 3's is one fixed size, the tower's).

use std::path::Path;

use serde_json::json;
use tokenizers::Tokenizer;

use super::{Choices, GgufError, GgufHeader, weights};
use crate::image::ImageProcessor;
use crate::model::{ModelConfig, ModelError, ProjectorTower, VisionTower, Weights};

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
    #[error(
        "{path}: a projector of type {kind:?}, not one corral runs (it runs qwen3vl_merger, gemma3, gemma4v and pixtral)"
    )]
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

/// The projector types corral runs.
#[derive(Clone, Copy)]
enum Kind {
    Qwen3VlMerger,
    Gemma3,
    Gemma4,
    Pixtral,
}

/// The projector's type, where corral runs it.
fn kind(header: &GgufHeader) -> Result<Kind, ProjectorError> {
    if header.architecture() != Some("clip") {
        return Err(ProjectorError::Invalid {
            path: header.path.clone(),
            message: format!(
                "general.architecture is {:?}, not a projector's clip",
                header.architecture()
            ),
        });
    }
    // Projectors with an audio tower beside the vision one name the vision one's type apart.
    let kind = header
        .string("clip.projector_type")
        .or_else(|| header.string("clip.vision.projector_type"))
        .unwrap_or_default();
    match kind {
        "qwen3vl_merger" => Ok(Kind::Qwen3VlMerger),
        "gemma3" => Ok(Kind::Gemma3),
        "gemma4v" => Ok(Kind::Gemma4),
        "pixtral" => Ok(Kind::Pixtral),
        _ => Err(ProjectorError::Unsupported {
            path: header.path.clone(),
            kind: kind.to_owned(),
        }),
    }
}

/// What the projector at `path` takes while it encodes one image of at most a megapixel, each
/// activation `element_bytes` wide (`describe`'s reserve for images), from its header alone.
pub fn activation_bytes(path: &Path, element_bytes: u64) -> Result<u64, ProjectorError> {
    const MEGAPIXEL: u64 = 1 << 20;
    let header = GgufHeader::read(path)?;
    match kind(&header)? {
        Kind::Qwen3VlMerger => {
            let sizes = Sizes::read(&header)?;
            let merged = (sizes.patch * sizes.merge) as u64;
            let pixels = (4096 * merged * merged).min(MEGAPIXEL);
            Ok(crate::model::projector_activation_bytes(
                ProjectorTower::Qwen3_5,
                sizes.vision_config,
                pixels,
                element_bytes,
            ))
        }
        Kind::Gemma3 => {
            let sizes = Gemma3Sizes::read(&header)?;
            Ok(crate::model::projector_activation_bytes(
                ProjectorTower::Gemma3,
                sizes.vision_config,
                (sizes.image_size * sizes.image_size) as u64,
                element_bytes,
            ))
        }
        Kind::Pixtral => {
            let sizes = PixtralSizes::read(&header)?;
            let merged = (sizes.patch * sizes.merge) as u64;
            Ok(crate::model::projector_activation_bytes(
                ProjectorTower::Pixtral,
                sizes.vision_config,
                (1024 * merged * merged).min(MEGAPIXEL),
                element_bytes,
            ))
        }
        Kind::Gemma4 => {
            let sizes = Gemma4Sizes::read(&header)?;
            let square = (sizes.patch * sizes.pooling) as u64;
            Ok(crate::model::projector_activation_bytes(
                ProjectorTower::Gemma4,
                sizes.vision_config,
                (1120 * square * square).min(MEGAPIXEL),
                element_bytes,
            ))
        }
    }
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

/// A Gemma 3 projector's sizes, from its metadata.
struct Gemma3Sizes {
    image_size: usize,
    depth: usize,
    /// The tokens an image becomes: the patches along a side, pooled by the scale factor.
    tokens: i32,
    /// As transformers' `SiglipVisionConfig` has them.
    vision_config: serde_json::Value,
}

impl Gemma3Sizes {
    fn read(header: &GgufHeader) -> Result<Self, ProjectorError> {
        let integer = |key: &str| integer(header, key);
        let image_size = integer("clip.vision.image_size")?;
        let patch = integer("clip.vision.patch_size")?;
        let depth = integer("clip.vision.block_count")?;
        // llama.cpp's default, the releases' 4: 64 patches a side pooled to 16.
        let pool = integer("clip.vision.projector.scale_factor").unwrap_or(4);
        let per_side = image_size / patch.max(1) / pool.max(1);
        let eps = header
            .get("clip.vision.attention.layer_norm_epsilon")
            .and_then(|value| value.as_f64())
            .unwrap_or(1e-6);
        let vision_config = json!({
            "hidden_size": integer("clip.vision.embedding_length")?,
            "intermediate_size": integer("clip.vision.feed_forward_length")?,
            "num_hidden_layers": depth,
            "num_attention_heads": integer("clip.vision.attention.head_count")?,
            "image_size": image_size,
            "patch_size": patch,
            "layer_norm_eps": eps,
        });
        Ok(Self {
            image_size,
            depth,
            tokens: i32::try_from(per_side * per_side)
                .map_err(|_| invalid(header, "too many tokens an image".into()))?,
            vision_config,
        })
    }
}

/// A Gemma 4 projector's sizes, from its metadata and its tensors' shapes (the heads' sizes,
/// the position table's length, whether it clips its projections and standardizes its tokens).
struct Gemma4Sizes {
    patch: usize,
    pooling: usize,
    depth: usize,
    /// As transformers' `Gemma4VisionConfig` has them.
    vision_config: serde_json::Value,
}

impl Gemma4Sizes {
    fn read(header: &GgufHeader) -> Result<Self, ProjectorError> {
        let integer = |key: &str| integer(header, key);
        let dims = |name: &str| {
            header
                .tensors
                .iter()
                .find(|tensor| tensor.name == name)
                .map(|tensor| tensor.dims.clone())
                .ok_or_else(|| invalid(header, format!("no {name}")))
        };
        let has = |name: &str| header.tensors.iter().any(|tensor| tensor.name == name);
        let patch = integer("clip.vision.patch_size")?;
        let depth = integer("clip.vision.block_count")?;
        let heads = integer("clip.vision.attention.head_count")?;
        // llama.cpp's pooling square where the file names none.
        let pooling = integer("clip.vision.projector.scale_factor").unwrap_or(3);
        // Each projection's dimensions come input first.
        let output_of = |name: &str| -> Result<usize, ProjectorError> {
            let dims = dims(name)?;
            dims.get(1)
                .and_then(|&value| usize::try_from(value).ok())
                .ok_or_else(|| invalid(header, format!("{name} is not a matrix")))
        };
        let head_dim = output_of("v.blk.0.attn_q.weight")? / heads.max(1);
        let kv_heads = output_of("v.blk.0.attn_k.weight")? / head_dim.max(1);
        let positions = output_of("v.position_embd.weight")?;
        let eps = header
            .get("clip.vision.attention.layer_norm_epsilon")
            .and_then(|value| value.as_f64())
            .unwrap_or(1e-6);
        let vision_config = json!({
            "hidden_size": integer("clip.vision.embedding_length")?,
            "intermediate_size": integer("clip.vision.feed_forward_length")?,
            "num_hidden_layers": depth,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "head_dim": head_dim,
            "rms_norm_eps": eps,
            "pooling_kernel_size": pooling,
            "patch_size": patch,
            "position_embedding_size": positions,
            "use_clipped_linears": has("v.blk.0.attn_q.input_max"),
            "standardize": has("v.std_bias"),
        });
        Ok(Self {
            patch,
            pooling,
            depth,
            vision_config,
        })
    }
}

/// A Pixtral projector's sizes, from its metadata.
struct PixtralSizes {
    patch: usize,
    merge: usize,
    depth: usize,
    heads: usize,
    /// As transformers' `PixtralVisionConfig` has them.
    vision_config: serde_json::Value,
}

impl PixtralSizes {
    fn read(header: &GgufHeader) -> Result<Self, ProjectorError> {
        let integer = |key: &str| integer(header, key);
        let patch = integer("clip.vision.patch_size")?;
        let depth = integer("clip.vision.block_count")?;
        let heads = integer("clip.vision.attention.head_count")?;
        let silu = header
            .get("clip.use_silu")
            .and_then(|value| value.as_bool())
            .unwrap_or(false);
        let vision_config = json!({
            "hidden_size": integer("clip.vision.embedding_length")?,
            "intermediate_size": integer("clip.vision.feed_forward_length")?,
            "num_hidden_layers": depth,
            "num_attention_heads": heads,
            "patch_size": patch,
            "hidden_act": if silu { "silu" } else { "gelu" },
            // llama.cpp's, which the file does not hold.
            "rope_theta": 10_000.0,
        });
        Ok(Self {
            patch,
            merge: integer("clip.vision.spatial_merge_size").unwrap_or(1),
            depth,
            heads,
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

/// The projector at `path` for the text model `text` whose tokenizer is `tokenizer`.
pub fn load(
    path: &Path,
    tokenizer: &Tokenizer,
    text: &ModelConfig,
) -> Result<Projector, ProjectorError> {
    let header = GgufHeader::read(path)?;
    let kind = kind(&header)?;
    let normalization = [
        triple(&header, "clip.vision.image_mean")?,
        triple(&header, "clip.vision.image_std")?,
    ];
    let token = |name: &str| {
        tokenizer.token_to_id(name).ok_or_else(|| {
            invalid(
                &header,
                format!("the text model's vocabulary has no {name}"),
            )
        })
    };
    let mut tensors = weights::load(&header, Choices::default())?;
    let (tower, processor) = match kind {
        Kind::Qwen3VlMerger => {
            let sizes = Sizes::read(&header)?;
            qwen3vl_names(&mut tensors, sizes.depth)?;
            let image_token = token("<|image_pad|>")?;
            let tower = VisionTower::qwen3_5_from_projector(
                sizes.vision_config,
                &mut tensors,
                image_token,
                path,
            )?;
            let [mean, std] = normalization;
            let processor = ImageProcessor::qwen_vl_projector(sizes.patch, sizes.merge, mean, std);
            (tower, processor)
        }
        Kind::Gemma3 => {
            let sizes = Gemma3Sizes::read(&header)?;
            let mut projector = gemma3_names(&mut tensors, sizes.depth)?
                .ok_or_else(|| invalid(&header, "no mm.* projector tensors".into()))?;
            let tokens = [
                token("<start_of_image>")?,
                token("<image_soft_token>")?,
                token("<end_of_image>")?,
            ];
            let tower = VisionTower::gemma3_from_projector(
                sizes.vision_config,
                &mut tensors,
                &mut projector,
                sizes.tokens,
                tokens,
                path,
            )?;
            let processor = ImageProcessor::gemma3_projector(sizes.image_size, normalization);
            (tower, processor)
        }
        Kind::Gemma4 => {
            let sizes = Gemma4Sizes::read(&header)?;
            let mut embedder = gemma4_names(&mut tensors, sizes.depth)?
                .ok_or_else(|| invalid(&header, "no mm.input_projection.weight".into()))?;
            let tokens = [token("<|image>")?, token("<|image|>")?, token("<image|>")?];
            let tower = VisionTower::gemma4_from_projector(
                sizes.vision_config,
                &mut tensors,
                &mut embedder,
                tokens,
                path,
            )?;
            let processor =
                ImageProcessor::gemma4_projector(sizes.patch, sizes.pooling, normalization);
            (tower, processor)
        }
        Kind::Pixtral => {
            let sizes = PixtralSizes::read(&header)?;
            let mut projector = pixtral_names(&mut tensors, sizes.depth, sizes.heads)?
                .ok_or_else(|| invalid(&header, "no mm.* projector tensors".into()))?;
            let tower = VisionTower::pixtral_from_projector(
                sizes.vision_config,
                sizes.merge,
                text,
                &mut tensors,
                &mut projector,
                token("[IMG]")?,
                path,
            )?;
            let processor =
                ImageProcessor::pixtral_projector(sizes.patch, sizes.merge, normalization);
            (tower, processor)
        }
    };
    let leftovers = tensors.leftover_names();
    if !leftovers.is_empty() {
        tracing::warn!(projector = %path.display(), tensors = ?leftovers, "ignoring projector tensors no layer uses");
    }
    Ok(Projector { tower, processor })
}

/// The three numbers of metadata `key` (the processor's mean or std).
fn triple(header: &GgufHeader, key: &str) -> Result<[f32; 3], ProjectorError> {
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
        .ok_or_else(|| invalid(header, format!("{key} must be three numbers")))
}

/// Each of `depth` blocks' layers under llama.cpp's name (`v.blk.N.{gguf}`) renamed to
/// transformers' (`{prefix}.N.{transformers}`), for each pair of `layers`.
fn rename_blocks(tensors: &mut Weights, depth: usize, prefix: &str, layers: &[(&str, &str)]) {
    for block in 0..depth {
        for (gguf, transformers) in layers {
            tensors.rename_layer(
                &format!("v.blk.{block}.{gguf}"),
                &format!("{prefix}.{block}.{transformers}"),
            );
        }
    }
}

/// llama.cpp's names for Gemma 3's tower (SigLIP) as transformers names it under
/// `vision_tower.`; the projector's two tensors are split off as transformers names them under
/// `multi_modal_projector.`. llama.cpp stores the projector's norm weight with Gemma's one
/// added, which transformers' offset takes off again.
fn gemma3_names(tensors: &mut Weights, depth: usize) -> Result<Option<Weights>, ModelError> {
    tensors.rename_layer("v.patch_embd", "embeddings.patch_embedding");
    tensors.rename(
        "v.position_embd.weight",
        "embeddings.position_embedding.weight",
    );
    let layers = [
        ("ln1", "layer_norm1"),
        ("ln2", "layer_norm2"),
        ("attn_q", "self_attn.q_proj"),
        ("attn_k", "self_attn.k_proj"),
        ("attn_v", "self_attn.v_proj"),
        ("attn_out", "self_attn.out_proj"),
        ("ffn_up", "mlp.fc1"),
        ("ffn_down", "mlp.fc2"),
    ];
    rename_blocks(tensors, depth, "encoder.layers", &layers);
    tensors.rename_layer("v.post_ln", "post_layernorm");
    tensors.convert(
        "mm.soft_emb_norm.weight",
        "projector.mm_soft_emb_norm.weight",
        "taking Gemma's one off the projector's norm",
        |weight| mlx_rs::ops::subtract(weight, mlx_rs::Array::from_f32(1.0)),
    )?;
    tensors.rename(
        "mm.input_projection.weight",
        "projector.mm_input_projection_weight",
    );
    Ok(tensors.split_off("projector."))
}

/// llama.cpp's names for Pixtral's tower as transformers names it under `vision_tower.`; the
/// projector's are split off as transformers names them under `multi_modal_projector.`. The
/// converter permuted the query and key projections' rows for llama.cpp's rotation (each head's
/// halves interleaved, `LlamaModel.permute`), which is undone; `[IMG_BREAK]`'s embedding, which
/// llama.cpp keeps with the projector, is the text model's own and is dropped.
fn pixtral_names(
    tensors: &mut Weights,
    depth: usize,
    heads: usize,
) -> Result<Option<Weights>, ModelError> {
    tensors.rename("v.patch_embd.weight", "patch_conv.weight");
    tensors.rename("v.pre_ln.weight", "ln_pre.weight");
    tensors.discard("v.token_embd.img_break");
    let layers = [
        ("ln1", "attention_norm"),
        ("ln2", "ffn_norm"),
        ("attn_v", "attention.v_proj"),
        ("attn_out", "attention.o_proj"),
        ("ffn_gate", "feed_forward.gate_proj"),
        ("ffn_up", "feed_forward.up_proj"),
        ("ffn_down", "feed_forward.down_proj"),
    ];
    rename_blocks(tensors, depth, "transformer.layers", &layers);
    let heads = heads as i32;
    for block in 0..depth {
        let layer = |name: &str| format!("transformer.layers.{block}.{name}");
        for (gguf, transformers) in [
            ("attn_q", "attention.q_proj"),
            ("attn_k", "attention.k_proj"),
        ] {
            for part in ["weight", "bias"] {
                tensors.convert(
                    &format!("v.blk.{block}.{gguf}.{part}"),
                    &format!("{}.{part}", layer(transformers)),
                    "undoing llama.cpp's permutation of a projection's rows",
                    |rows| {
                        let shape = rows.shape().to_vec();
                        let mut split = vec![heads, shape[0] / heads / 2, 2];
                        split.extend_from_slice(&shape[1..]);
                        rows.reshape(&split)?.swap_axes(1, 2)?.reshape(&shape)
                    },
                )?;
            }
        }
    }
    for (gguf, transformers) in [
        ("mm.input_norm", "norm"),
        ("mm.patch_merger", "patch_merger.merging_layer"),
        ("mm.1", "linear_1"),
        ("mm.2", "linear_2"),
    ] {
        tensors.rename_layer(gguf, &format!("projector.{transformers}"));
    }
    Ok(tensors.split_off("projector."))
}

/// llama.cpp's names for Gemma 4's tower as transformers names it under `vision_tower.`; the
/// embedder's projection is split off as transformers names it under `embed_vision.`. The
/// converter turned the patch projection into a convolution's (`[hidden, channels, rows,
/// columns]`) and each clipping bound into a one-element vector; both are turned back.
fn gemma4_names(tensors: &mut Weights, depth: usize) -> Result<Option<Weights>, ModelError> {
    tensors.convert(
        "v.patch_embd.weight",
        "patch_embedder.input_proj.weight",
        "flattening the patch projection with the channels last",
        |weight| {
            let hidden = weight.dim(0);
            weight.transpose_axes(&[0, 2, 3, 1])?.reshape(&[hidden, -1])
        },
    )?;
    tensors.rename(
        "v.position_embd.weight",
        "patch_embedder.position_embedding_table",
    );
    tensors.rename("v.std_bias", "std_bias");
    tensors.rename("v.std_scale", "std_scale");
    let norms = [
        ("ln1", "input_layernorm"),
        ("attn_post_norm", "post_attention_layernorm"),
        ("ln2", "pre_feedforward_layernorm"),
        ("ffn_post_norm", "post_feedforward_layernorm"),
        ("attn_q_norm", "self_attn.q_norm"),
        ("attn_k_norm", "self_attn.k_norm"),
    ];
    rename_blocks(tensors, depth, "encoder.layers", &norms);
    for block in 0..depth {
        let layer = |name: &str| format!("encoder.layers.{block}.{name}");
        for (gguf, transformers) in [
            ("attn_q", "self_attn.q_proj"),
            ("attn_k", "self_attn.k_proj"),
            ("attn_v", "self_attn.v_proj"),
            ("attn_out", "self_attn.o_proj"),
            ("ffn_gate", "mlp.gate_proj"),
            ("ffn_up", "mlp.up_proj"),
            ("ffn_down", "mlp.down_proj"),
        ] {
            let (from, to) = (format!("v.blk.{block}.{gguf}"), layer(transformers));
            tensors.rename_layer(&from, &format!("{to}.linear"));
            for bound in ["input_min", "input_max", "output_min", "output_max"] {
                tensors.convert(
                    &format!("{from}.{bound}"),
                    &format!("{to}.{bound}"),
                    "reading a clipping bound as a scalar",
                    |value| value.reshape(&[]),
                )?;
            }
        }
    }
    tensors.rename(
        "mm.input_projection.weight",
        "embedder.embedding_projection.weight",
    );
    Ok(tensors.split_off("embedder."))
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
    let layers = [
        ("ln1", "norm1"),
        ("ln2", "norm2"),
        ("attn_qkv", "attn.qkv"),
        ("attn_out", "attn.proj"),
        ("ffn_up", "mlp.linear_fc1"),
        ("ffn_down", "mlp.linear_fc2"),
    ];
    rename_blocks(tensors, depth, "blocks", &layers);
    tensors.rename_layer("v.post_ln", "merger.norm");
    tensors.rename_layer("mm.0", "merger.linear_fc1");
    tensors.rename_layer("mm.2", "merger.linear_fc2");
    Ok(())
}
