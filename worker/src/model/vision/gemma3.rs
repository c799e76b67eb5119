//! Gemma 3's vision tower (transformers' `SiglipVisionModel` and `Gemma3MultiModalProjector`,
//! mlx-vlm's `gemma3/vision.py`): the image cut into patches by one projection, a learned
//! position per patch, blocks of full attention over the image with LayerNorm and a GELU MLP, a
//! last LayerNorm; then the projector averages each square of patches into one token, normalizes
//! it as Gemma does (`1 + w`) and projects it to the text model's width.

use std::path::Path;

use mlx_rs::error::Exception;
use mlx_rs::{Array, ops};
use serde::Deserialize;

use super::{attend_all, block_multiply_adds, heads_of, patch_projection, peak_bytes};
use crate::model::blocks::linear::Linear;
use crate::model::blocks::mlp::gelu_tanh;
use crate::model::blocks::norm::Norm;
use crate::model::config::Quantization;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// `vision_config`, defaulting as transformers' `SiglipVisionConfig`.
#[derive(Deserialize)]
#[serde(default)]
pub struct Args {
    hidden_size: i32,
    intermediate_size: i32,
    num_hidden_layers: i32,
    num_attention_heads: i32,
    num_channels: i32,
    image_size: i32,
    patch_size: i32,
    hidden_act: String,
    layer_norm_eps: f32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_channels: 3,
            image_size: 224,
            patch_size: 16,
            hidden_act: "gelu_pytorch_tanh".into(),
            layer_norm_eps: 1e-6,
        }
    }
}

impl Args {
    /// Patches along each side of the (square) image.
    fn side(&self) -> i32 {
        self.image_size / self.patch_size.max(1)
    }

    /// The peak of encoding one image, as [`peak_bytes`] counts a block's.
    pub fn activation_bytes(&self, element_bytes: u64) -> u64 {
        let patches = u64::try_from(self.side() * self.side()).unwrap_or(0);
        let shape = [
            self.num_attention_heads,
            self.hidden_size,
            self.intermediate_size,
        ];
        peak_bytes(patches, shape, element_bytes)
    }
}

pub struct Tower {
    patch_embed: Linear,
    /// `[patches, hidden]`, one per patch in row-major order.
    positions: Array,
    blocks: Vec<Block>,
    post_norm: Norm,
    projector: Projector,
    heads: i32,
    hidden: i32,
    intermediate: i32,
    channels: i32,
    patch: i32,
    side: i32,
}

/// An image part-way through the tower: its hidden states before block `next_block`.
pub struct Staged {
    hidden: Array,
    pub(super) next_block: usize,
}

struct Block {
    norm1: Norm,
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    out_proj: Linear,
    norm2: Norm,
    fc1: Linear,
    fc2: Linear,
}

struct Projector {
    /// Patches averaged along each side into one token.
    pool: i32,
    norm: Norm,
    /// `[vision hidden, text hidden]`: the projection is `x · w`.
    projection: Array,
}

impl Tower {
    /// The tower from `tower` (SigLIP's tensors, its prefix taken off) and `projector` (the
    /// projector's), for a text model `text_hidden` wide, whose images have `tokens` tokens
    /// each.
    pub fn load(
        args: &Args,
        tower: &mut Weights,
        projector: &mut Weights,
        text_hidden: i32,
        tokens: i32,
        quantization: Option<Quantization>,
        config_path: &Path,
    ) -> Result<Self, ModelError> {
        let bad = |message: String| ModelError::Config {
            path: config_path.to_path_buf(),
            message,
        };
        if args.hidden_act != "gelu_pytorch_tanh" {
            return Err(bad(format!(
                "vision_config.hidden_act {:?}: Gemma 3's tower runs gelu_pytorch_tanh",
                args.hidden_act
            )));
        }
        let side = args.side();
        let per_side = (f64::from(tokens).sqrt()) as i32;
        if per_side * per_side != tokens || per_side == 0 || side % per_side != 0 {
            return Err(bad(format!(
                "mm_tokens_per_image {tokens} must be a square whose side divides the {side} \
                 patches along the image's side"
            )));
        }
        let (hidden, channels, patch) = (args.hidden_size, args.num_channels, args.patch_size);
        let patch_embed = Linear::Dense {
            weight: patch_projection(
                tower,
                "embeddings.patch_embedding.weight",
                [hidden, channels, patch],
            )?,
            bias: Some(tower.take_float("embeddings.patch_embedding.bias", &[hidden])?),
        };
        let positions = tower.take_float(
            "embeddings.position_embedding.weight",
            &[side * side, hidden],
        )?;
        let eps = args.layer_norm_eps;
        let linear = |weights: &mut Weights, name: &str, out: i32, input: i32| {
            Linear::load(weights, name, out, input, true, quantization)
        };
        let intermediate = args.intermediate_size;
        let blocks = (0..args.num_hidden_layers)
            .map(|index| {
                let prefix = format!("encoder.layers.{index}");
                let attention = |weights: &mut Weights, name: &str| {
                    linear(
                        weights,
                        &format!("{prefix}.self_attn.{name}"),
                        hidden,
                        hidden,
                    )
                };
                Ok(Block {
                    norm1: Norm::layer(tower, &format!("{prefix}.layer_norm1"), hidden, eps)?,
                    q_proj: attention(tower, "q_proj")?,
                    k_proj: attention(tower, "k_proj")?,
                    v_proj: attention(tower, "v_proj")?,
                    out_proj: attention(tower, "out_proj")?,
                    norm2: Norm::layer(tower, &format!("{prefix}.layer_norm2"), hidden, eps)?,
                    fc1: linear(tower, &format!("{prefix}.mlp.fc1"), intermediate, hidden)?,
                    fc2: linear(tower, &format!("{prefix}.mlp.fc2"), hidden, intermediate)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let post_norm = Norm::layer(tower, "post_layernorm", hidden, eps)?;
        let projector = Projector {
            pool: side / per_side,
            norm: Norm::rms_offset(projector, "mm_soft_emb_norm.weight", hidden, eps)?,
            projection: projector
                .take_float("mm_input_projection_weight", &[hidden, text_hidden])?,
        };
        Ok(Self {
            patch_embed,
            positions,
            blocks,
            post_norm,
            projector,
            heads: args.num_attention_heads,
            hidden,
            intermediate,
            channels,
            patch,
            side,
        })
    }

    /// Starts one image's encoding: its `pixel_values` (`[1, channels · size · size]`, channel
    /// by channel) cut into patches, embedded and placed, before the first block.
    pub fn begin(&self, pixels: &Array) -> Result<Staged, Exception> {
        let (side, patch) = (self.side, self.patch);
        let patches = pixels
            .as_dtype(self.positions.dtype())?
            .reshape(&[self.channels, side, patch, side, patch])?
            .transpose_axes(&[1, 3, 0, 2, 4])?
            .reshape(&[side * side, self.channels * patch * patch])?;
        let hidden = ops::add(&self.patch_embed.forward(&patches)?, &self.positions)?;
        Ok(Staged {
            hidden,
            next_block: 0,
        })
    }

    /// Runs the blocks `staged` has not run, at most `count` of them; once it has run the last,
    /// the image's text rows, `[tokens, text hidden]`.
    pub fn advance(&self, staged: &mut Staged, count: usize) -> Result<Option<Array>, Exception> {
        let end = (staged.next_block + count).min(self.blocks.len());
        for block in &self.blocks[staged.next_block..end] {
            staged.hidden = block.forward(&staged.hidden, self.heads)?;
        }
        staged.next_block = end;
        if end < self.blocks.len() {
            staged.hidden.eval()?;
            return Ok(None);
        }
        let normed = self.post_norm.forward(&staged.hidden)?;
        self.projector.forward(&normed, self.side).map(Some)
    }

    pub fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// One block's multiply-adds over an image.
    pub fn block_multiply_adds(&self) -> f64 {
        block_multiply_adds(self.side * self.side, self.hidden, self.intermediate)
    }

    /// The peak of encoding an image.
    pub fn activation_bytes(&self, element_bytes: u64) -> u64 {
        let patches = u64::try_from(self.side * self.side).unwrap_or(0);
        let shape = [self.heads, self.hidden, self.intermediate];
        peak_bytes(patches, shape, element_bytes)
    }

    /// The tokens an image becomes.
    pub fn rows(&self) -> usize {
        let per_side = self.side / self.projector.pool;
        usize::try_from(per_side * per_side).unwrap_or(0)
    }
}

impl Block {
    fn forward(&self, x: &Array, heads: i32) -> Result<Array, Exception> {
        let h = ops::add(x, &self.attend(&self.norm1.forward(x)?, heads)?)?;
        let fed = self
            .fc2
            .forward(&gelu_tanh(&self.fc1.forward(&self.norm2.forward(&h)?)?)?)?;
        ops::add(&h, &fed)
    }

    /// Full attention over one image's patches.
    fn attend(&self, x: &Array, heads: i32) -> Result<Array, Exception> {
        let split = |projection: &Linear| heads_of(projection.forward(x)?, heads);
        let output = attend_all(
            &split(&self.q_proj)?,
            &split(&self.k_proj)?,
            &split(&self.v_proj)?,
        )?;
        self.out_proj.forward(&output)
    }
}

impl Projector {
    /// `x` (`[side · side, hidden]`, row-major patches) averaged over each `pool × pool`
    /// square, normalized and projected: `[tokens, text hidden]`.
    fn forward(&self, x: &Array, side: i32) -> Result<Array, Exception> {
        let (pool, hidden) = (self.pool, x.dim(-1));
        let tokens = side / pool;
        let pooled = x
            .reshape(&[tokens, pool, tokens, pool, hidden])?
            .mean_axes(&[1, 3], false)?
            .reshape(&[tokens * tokens, hidden])?;
        let normed = self.norm.forward(&pooled)?;
        ops::matmul(&normed, &self.projection.as_dtype(normed.dtype())?)
    }
}
