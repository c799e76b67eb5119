//! Vision towers: what turns an image's patches into the rows a multimodal model's text model
//! reads in place of the image's tokens. One file per tower, as `arch/` holds one per text model;
//! a wrapper's checkpoint (`qwen3_5`, `gemma3`, ...) holds its tower's tensors beside the text
//! model's, under transformers' names (`model.visual.`, `vision_tower.`) or mlx-vlm's
//! (`checkpoint.rs` says which, `blocks.rs` holds what the towers share).

mod blocks;
mod checkpoint;
mod gemma3;
mod gemma4;
mod pixtral;
mod qwen3_5;

use std::path::Path;

use mlx_rs::Array;
use mlx_rs::error::Exception;

use super::config::ModelConfig;
use super::error::ModelError;
use super::kv_cache::KvCache;
use super::weights::Weights;
use blocks::{
    attend_all, attend_all_scaled, block_multiply_adds, heads_of, patch_projection, patches_in,
    peak_bytes,
};
use checkpoint::{
    Family, WrapperArgs, embedder_tensors, owned_names, projector_tensors, vision_args,
};
pub use checkpoint::{activation_bytes, has_tower, projector_activation_bytes};

pub struct VisionTower {
    tower: Tower,
    tokens: ImageTokenIds,
    both_ways: ImagesSeenBothWays,
}

/// Which of the text model's layers let an image's tokens see each other both ways in the
/// prompt, not only their past, as transformers masks them by their token types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImagesSeenBothWays {
    Nowhere,
    /// Gemma 3's.
    EveryLayer,
    /// Gemma 4's with `use_bidirectional_attention = "vision"`: its full-attention layers stay
    /// causal.
    SlidingLayers,
}

impl ImagesSeenBothWays {
    /// Whether the layer that keeps `cache` sees an image's tokens both ways.
    pub fn in_layer_of(self, cache: &KvCache) -> bool {
        match self {
            Self::Nowhere => false,
            Self::EveryLayer => true,
            Self::SlidingLayers => cache.is_sliding(),
        }
    }
}

enum Tower {
    Qwen3_5(qwen3_5::Tower),
    Gemma3(gemma3::Tower),
    Gemma4(gemma4::Tower),
    Pixtral(pixtral::Tower),
}

/// The tokens that stand for an image in the text.
struct ImageTokenIds {
    /// The token the chat template writes once per image.
    placeholder: u32,
    /// The token whose embeddings the tower's rows replace.
    row: u32,
    /// The tokens around the rows, where the processor writes them (Gemma 3's).
    around: Option<(u32, u32)>,
}

/// An image part-way through its tower.
pub struct Encoding {
    staged: Staged,
    pub grid: [i32; 3],
}

enum Staged {
    Qwen3_5(qwen3_5::Staged),
    Gemma3(gemma3::Staged),
    Gemma4(gemma4::Staged),
    Pixtral(pixtral::Staged),
}

/// What stands for one image in the text, in place of the placeholder the template wrote, as
/// the model's processor spells it: tokens, or text that tokenizes with its neighbours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImagePiece {
    Token(u32),
    Text(&'static str),
}

/// Where the rows of an image sit for a tower whose text model turns by multi-section rotary
/// positions (Qwen's M-RoPE): each row's (time, row, column) from the image's first position,
/// in order, and how far the positions of the text after it move on.
pub struct ImageTokens {
    pub positions: Vec<[i32; 3]>,
    pub advance: i32,
}

impl VisionTower {
    /// The tower of a wrapper checkpoint whose tower corral runs, taking its tensors from
    /// `weights`; `None` for a text model, or a checkpoint without the tower's tensors or its
    /// `vision_config` (a text model converted out of its wrapper).
    pub fn load(config: &ModelConfig, weights: &mut Weights) -> Result<Option<Self>, ModelError> {
        let Some(family) = Family::of(config) else {
            return Ok(None);
        };
        let Some((prefix, mut tensors)) = family
            .tower_prefixes()
            .iter()
            .find_map(|prefix| Some((*prefix, weights.split_off(prefix)?)))
        else {
            return Ok(None);
        };
        let bad = |message: String| ModelError::Config {
            path: config.path.clone(),
            message,
        };
        let whole = std::fs::read_to_string(&config.path)
            .map_err(|error| bad(format!("reading it again for the vision tower: {error}")))?;
        let wrapper_args: WrapperArgs =
            serde_json::from_str(&whole).map_err(|error| bad(error.to_string()))?;
        let Some(vision_config) = wrapper_args.vision_config.clone() else {
            return Ok(None);
        };
        // The projector's tensors no layer used, where the tower has them apart (Gemma 3's).
        let mut projector_leftovers = Vec::new();
        let mut both_ways = ImagesSeenBothWays::Nowhere;
        let (tower, tokens) = match family {
            Family::Qwen3_5 => {
                let channels_last = prefix == "vision_tower.";
                let tower = qwen3_5::Tower::load(
                    &vision_args(config, vision_config)?,
                    &mut tensors,
                    channels_last,
                    config.quantization,
                    &config.path,
                )?;
                // transformers' `Qwen3_5Config` default.
                let image = wrapper_args.image_token_id.unwrap_or(248_056);
                let tokens = ImageTokenIds {
                    placeholder: image,
                    row: image,
                    around: None,
                };
                (Tower::Qwen3_5(tower), tokens)
            }
            Family::Mistral3 => {
                let mut projector = projector_tensors(weights)
                    .ok_or_else(|| bad("the vision tower has no multi_modal_projector".into()))?;
                if wrapper_args
                    .vision_feature_layer
                    .as_ref()
                    .is_some_and(|layer| layer.as_i64() != Some(-1))
                {
                    return Err(bad(
                        "vision_feature_layer: corral's Pixtral tower gives its last layer (-1) \
                         only"
                            .into(),
                    ));
                }
                let act = wrapper_args
                    .projector_hidden_act
                    .as_deref()
                    .unwrap_or("gelu");
                if act != "gelu" {
                    return Err(bad(format!(
                        "projector_hidden_act {act:?}: Mistral 3's projector runs gelu"
                    )));
                }
                let projector_args = pixtral::ProjectorArgs {
                    merge: wrapper_args.spatial_merge_size.unwrap_or(2),
                    bias: wrapper_args.multimodal_projector_bias.unwrap_or(false),
                    text_hidden: config.hidden_size,
                    text_eps: config.rms_norm_eps,
                };
                let tower = pixtral::Tower::load(
                    &vision_args(config, vision_config)?,
                    &projector_args,
                    &mut tensors,
                    &mut projector,
                    config.quantization,
                    &config.path,
                )?;
                projector_leftovers = owned_names(&projector);
                // transformers' `Mistral3Config` default.
                let image = wrapper_args.image_token_index.unwrap_or(10);
                let tokens = ImageTokenIds {
                    placeholder: image,
                    row: image,
                    around: None,
                };
                (Tower::Pixtral(tower), tokens)
            }
            Family::Gemma3 => {
                let mut projector = projector_tensors(weights)
                    .ok_or_else(|| bad("the vision tower has no multi_modal_projector".into()))?;
                let tower = gemma3::Tower::load(
                    &vision_args(config, vision_config)?,
                    &mut tensors,
                    &mut projector,
                    config.hidden_size,
                    wrapper_args.mm_tokens_per_image.unwrap_or(256),
                    config.quantization,
                    &config.path,
                )?;
                projector_leftovers = owned_names(&projector);
                // transformers' `Gemma3Config` defaults.
                let boi = wrapper_args.boi_token_index.unwrap_or(255_999);
                let tokens = ImageTokenIds {
                    placeholder: boi,
                    row: wrapper_args.image_token_index.unwrap_or(262_144),
                    around: Some((boi, wrapper_args.eoi_token_index.unwrap_or(256_000))),
                };
                both_ways = ImagesSeenBothWays::EveryLayer;
                (Tower::Gemma3(tower), tokens)
            }
            Family::Gemma4 => {
                let mut embedder = embedder_tensors(weights)
                    .ok_or_else(|| bad("the vision tower has no embed_vision".into()))?;
                let tower = gemma4::Tower::load(
                    &vision_args(config, vision_config)?,
                    &mut tensors,
                    &mut embedder,
                    config.hidden_size,
                    config.quantization,
                    &config.path,
                )?;
                projector_leftovers = owned_names(&embedder);
                if wrapper_args.bidirectional_attention() == Some("vision") {
                    both_ways = ImagesSeenBothWays::SlidingLayers;
                }
                // transformers' `Gemma4Config` defaults.
                let image = wrapper_args.image_token_id.unwrap_or(258_880);
                let tokens = ImageTokenIds {
                    placeholder: image,
                    row: image,
                    around: Some((
                        wrapper_args.boi_token_id.unwrap_or(255_999),
                        wrapper_args.eoi_token_id.unwrap_or(258_882),
                    )),
                };
                (Tower::Gemma4(tower), tokens)
            }
        };
        let mut leftovers: Vec<&str> = tensors.leftover_names();
        leftovers.extend(projector_leftovers.iter().map(String::as_str));
        if !leftovers.is_empty() {
            tracing::warn!(model = %config.path.display(), tensors = ?leftovers, "ignoring vision tensors no layer uses");
        }
        Ok(Some(Self {
            tower,
            tokens,
            both_ways,
        }))
    }

    /// Qwen3.5's tower from a llama.cpp projector's tensors, renamed to transformers' names
    /// (`gguf/mmproj.rs`), with the `vision_config` its metadata gives; `image_token` is both
    /// the placeholder and the row token.
    pub fn qwen3_5_from_projector(
        vision_config: serde_json::Value,
        tensors: &mut Weights,
        image_token: u32,
        path: &Path,
    ) -> Result<Self, ModelError> {
        let args: qwen3_5::Args = projector_args(vision_config, path)?;
        let tower = qwen3_5::Tower::load(&args, tensors, false, None, path)?;
        Ok(Self {
            tower: Tower::Qwen3_5(tower),
            tokens: ImageTokenIds {
                placeholder: image_token,
                row: image_token,
                around: None,
            },
            both_ways: ImagesSeenBothWays::Nowhere,
        })
    }

    /// Gemma 3's tower from a llama.cpp projector's tensors, renamed to transformers' names
    /// (`gguf/mmproj.rs`: the tower's in `tower`, the projector's in `projector`), with the
    /// `vision_config` its metadata gives; its images become `tokens` rows each, between
    /// `[begin, row, end]`'s first and last.
    pub fn gemma3_from_projector(
        vision_config: serde_json::Value,
        tower: &mut Weights,
        projector: &mut Weights,
        tokens: i32,
        [begin, row, end]: [u32; 3],
        path: &Path,
    ) -> Result<Self, ModelError> {
        let args: gemma3::Args = projector_args(vision_config, path)?;
        let text_hidden = projector
            .shape_of("mm_input_projection_weight")
            .and_then(|shape| shape.get(1).copied())
            .ok_or_else(|| ModelError::Config {
                path: path.to_path_buf(),
                message: "the projector has no mm.input_projection.weight of two axes".into(),
            })?;
        let tower = gemma3::Tower::load(&args, tower, projector, text_hidden, tokens, None, path)?;
        Ok(Self {
            tower: Tower::Gemma3(tower),
            tokens: ImageTokenIds {
                placeholder: begin,
                row,
                around: Some((begin, end)),
            },
            both_ways: ImagesSeenBothWays::EveryLayer,
        })
    }

    /// Mistral 3's (Pixtral's) tower from a llama.cpp projector's tensors, renamed to
    /// transformers' names (`gguf/mmproj.rs`: the tower's in `tower`, the projector's in
    /// `projector`), with the `vision_config` its metadata gives, merging `merge` patches a side,
    /// for the text model `text`; `image_token` is the row token.
    pub fn pixtral_from_projector(
        vision_config: serde_json::Value,
        merge: usize,
        text: &ModelConfig,
        tower: &mut Weights,
        projector: &mut Weights,
        image_token: u32,
        path: &Path,
    ) -> Result<Self, ModelError> {
        let args: pixtral::Args = projector_args(vision_config, path)?;
        let projector_args = pixtral::ProjectorArgs {
            merge: i32::try_from(merge).unwrap_or(1),
            bias: projector.contains("linear_1.bias"),
            text_hidden: text.hidden_size,
            text_eps: text.rms_norm_eps,
        };
        let tower = pixtral::Tower::load(&args, &projector_args, tower, projector, None, path)?;
        Ok(Self {
            tower: Tower::Pixtral(tower),
            tokens: ImageTokenIds {
                placeholder: image_token,
                row: image_token,
                around: None,
            },
            both_ways: ImagesSeenBothWays::Nowhere,
        })
    }

    /// Gemma 4's tower from a llama.cpp projector's tensors, renamed to transformers' names
    /// (`gguf/mmproj.rs`: the tower's in `tower`, the embedder's in `embedder`), with the
    /// `vision_config` its metadata and shapes give; its images' rows stand between
    /// `[begin, row, end]`'s first and last. No metadata says whether an image's tokens see each
    /// other both ways; as llama.cpp, the E2B's and E4B's text widths (1536, 2560) mark the
    /// releases that keep them causal.
    pub fn gemma4_from_projector(
        vision_config: serde_json::Value,
        tower: &mut Weights,
        embedder: &mut Weights,
        [begin, row, end]: [u32; 3],
        path: &Path,
    ) -> Result<Self, ModelError> {
        let args: gemma4::Args = projector_args(vision_config, path)?;
        let text_hidden = embedder
            .shape_of("embedding_projection.weight")
            .and_then(|shape| shape.first().copied())
            .ok_or_else(|| ModelError::Config {
                path: path.to_path_buf(),
                message: "the projector has no mm.input_projection.weight of two axes".into(),
            })?;
        let tower = gemma4::Tower::load(&args, tower, embedder, text_hidden, None, path)?;
        let both_ways = if matches!(text_hidden, 1536 | 2560) {
            ImagesSeenBothWays::Nowhere
        } else {
            ImagesSeenBothWays::SlidingLayers
        };
        Ok(Self {
            tower: Tower::Gemma4(tower),
            tokens: ImageTokenIds {
                placeholder: row,
                row,
                around: Some((begin, end)),
            },
            both_ways,
        })
    }

    /// One image's rows for the text model, `[tokens, hidden]`, from its `patches`
    /// (`[patches, values]`, as the model's processor lays them out) over a `grid` of
    /// `[time, rows, columns]` patches.
    pub fn encode(&self, patches: &Array, grid: [i32; 3]) -> Result<Array, Exception> {
        let mut encoding = self.begin(patches, grid)?;
        match self.advance(&mut encoding, self.depth())? {
            Some(rows) => Ok(rows),
            None => Err(Exception::from("the tower stopped short of its last block")),
        }
    }

    /// Starts encoding an image (as `encode` takes it), before the tower's first block; the
    /// batch runs the blocks a few at a time, so that a large image does not hold up the other
    /// sequences' tokens for longer than a prompt chunk does.
    pub fn begin(&self, patches: &Array, grid: [i32; 3]) -> Result<Encoding, Exception> {
        let staged = match &self.tower {
            Tower::Qwen3_5(tower) => Staged::Qwen3_5(tower.begin(patches, grid)?),
            Tower::Gemma3(tower) => Staged::Gemma3(tower.begin(patches)?),
            Tower::Gemma4(tower) => Staged::Gemma4(tower.begin(patches, grid)?),
            Tower::Pixtral(tower) => Staged::Pixtral(tower.begin(patches, grid)?),
        };
        Ok(Encoding { staged, grid })
    }

    /// Runs at most `blocks` more of the tower's blocks on `encoding`; the image's rows once
    /// the last has run.
    pub fn advance(
        &self,
        encoding: &mut Encoding,
        blocks: usize,
    ) -> Result<Option<Array>, Exception> {
        match (&self.tower, &mut encoding.staged) {
            (Tower::Qwen3_5(tower), Staged::Qwen3_5(staged)) => tower.advance(staged, blocks),
            (Tower::Gemma3(tower), Staged::Gemma3(staged)) => tower.advance(staged, blocks),
            (Tower::Gemma4(tower), Staged::Gemma4(staged)) => tower.advance(staged, blocks),
            (Tower::Pixtral(tower), Staged::Pixtral(staged)) => tower.advance(staged, blocks),
            _ => Err(Exception::from("an image staged by another tower")),
        }
    }

    /// The memory the tower takes at its peak while it encodes an image of `grid` patches,
    /// each activation `element_bytes` wide.
    pub fn activation_bytes(&self, grid: [i32; 3], element_bytes: u64) -> u64 {
        match &self.tower {
            Tower::Qwen3_5(tower) => tower.activation_bytes(grid, element_bytes),
            Tower::Gemma3(tower) => tower.activation_bytes(element_bytes),
            Tower::Gemma4(tower) => tower.activation_bytes(grid, element_bytes),
            Tower::Pixtral(tower) => tower.activation_bytes(grid, element_bytes),
        }
    }

    /// The blocks `encoding` has still to run.
    pub fn blocks_left(&self, encoding: &Encoding) -> usize {
        let done = match &encoding.staged {
            Staged::Qwen3_5(staged) => staged.next_block,
            Staged::Gemma3(staged) => staged.next_block,
            Staged::Gemma4(staged) => staged.next_block,
            Staged::Pixtral(staged) => staged.next_block,
        };
        self.depth().saturating_sub(done)
    }

    /// The tower's blocks.
    pub fn depth(&self) -> usize {
        match &self.tower {
            Tower::Qwen3_5(tower) => tower.depth(),
            Tower::Gemma3(tower) => tower.depth(),
            Tower::Gemma4(tower) => tower.depth(),
            Tower::Pixtral(tower) => tower.depth(),
        }
    }

    /// One block's multiply-adds over an image of `grid` patches, which the batch weighs
    /// against a prompt token's.
    pub fn block_multiply_adds(&self, grid: [i32; 3]) -> f64 {
        match &self.tower {
            Tower::Qwen3_5(tower) => tower.block_multiply_adds(grid),
            Tower::Gemma3(tower) => tower.block_multiply_adds(),
            Tower::Gemma4(tower) => tower.block_multiply_adds(grid),
            Tower::Pixtral(tower) => tower.block_multiply_adds(grid),
        }
    }

    /// What replaces the template's placeholder for an image of `grid` patches: Gemma 3's
    /// processor writes the rows between its begin and end tokens, a blank line either side
    /// (Gemma 4's template writes the blank lines itself);
    /// Pixtral's ends each row of merged patches with `[IMG_BREAK]`, the last with `[IMG_END]`.
    pub fn expansion(&self, grid: [i32; 3]) -> Vec<ImagePiece> {
        if let Tower::Pixtral(tower) = &self.tower {
            let (rows, columns) = tower.rows_and_columns(grid);
            let mut pieces = Vec::with_capacity(rows * (columns + 1));
            for row in 0..rows {
                pieces.extend(std::iter::repeat_n(
                    ImagePiece::Token(self.tokens.row),
                    columns,
                ));
                let last = row + 1 == rows;
                pieces.push(ImagePiece::Text(if last {
                    "[IMG_END]"
                } else {
                    "[IMG_BREAK]"
                }));
            }
            return pieces;
        }
        let rows = vec![ImagePiece::Token(self.tokens.row); self.rows(grid)];
        match self.tokens.around {
            None => rows,
            Some((begin, end)) if matches!(self.tower, Tower::Gemma4(_)) => [
                vec![ImagePiece::Token(begin)],
                rows,
                vec![ImagePiece::Token(end)],
            ]
            .concat(),
            Some((begin, end)) => [
                vec![ImagePiece::Text("\n\n"), ImagePiece::Token(begin)],
                rows,
                vec![ImagePiece::Token(end), ImagePiece::Text("\n\n")],
            ]
            .concat(),
        }
    }

    /// The rows the tower gives an image of `grid` patches.
    pub fn rows(&self, grid: [i32; 3]) -> usize {
        match &self.tower {
            Tower::Qwen3_5(tower) => tower.rows(grid),
            Tower::Gemma3(tower) => tower.rows(),
            Tower::Gemma4(tower) => tower.rows(grid),
            Tower::Pixtral(tower) => {
                let (rows, columns) = tower.rows_and_columns(grid);
                rows * columns
            }
        }
    }

    /// The multi-section rotary positions of an image of `grid` patches, for a text model that
    /// turns by them; `None` where the image's tokens turn as text does.
    pub fn rotary_positions(&self, grid: [i32; 3]) -> Option<ImageTokens> {
        match &self.tower {
            Tower::Qwen3_5(tower) => Some(tower.image_tokens(grid)),
            Tower::Gemma3(_) | Tower::Gemma4(_) | Tower::Pixtral(_) => None,
        }
    }

    /// Which layers let an image's tokens see each other both ways in the prompt.
    pub fn sees_images_both_ways(&self) -> ImagesSeenBothWays {
        self.both_ways
    }

    /// The token the chat template writes once per image.
    pub fn placeholder(&self) -> u32 {
        self.tokens.placeholder
    }

    /// The token whose embeddings the tower's rows replace, one per row, in order.
    pub fn row_token(&self) -> u32 {
        self.tokens.row
    }
}

/// A projector's `vision_config`, from its metadata, as a tower reads it.
fn projector_args<T: serde::de::DeserializeOwned>(
    vision_config: serde_json::Value,
    path: &Path,
) -> Result<T, ModelError> {
    serde_path_to_error::deserialize(vision_config).map_err(|error| ModelError::Config {
        path: path.to_path_buf(),
        message: format!("the projector's {}: {}", error.path(), error.inner()),
    })
}

/// The towers a llama.cpp projector file holds that corral runs.
#[derive(Clone, Copy)]
pub enum ProjectorTower {
    Qwen3_5,
    Gemma3,
    Gemma4,
    Pixtral,
}

#[cfg(test)]
pub(crate) mod tests;
