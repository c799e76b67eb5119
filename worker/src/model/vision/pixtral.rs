//! Mistral 3's vision tower (transformers' `PixtralVisionModel` and `Mistral3MultiModalProjector`,
//! mlx-vlm's `pixtral` vision): patches of any grid embedded by one projection and normalized,
//! blocks of full attention with a 2D rotation (a patch's row turns the even frequencies, its
//! column the odd ones) and a gated MLP, no final norm; then the projector normalizes, merges
//! each square of patches into one by a learned layer, and projects to the text model's width.

use std::path::Path;

use mlx_rs::error::Exception;
use mlx_rs::{Array, ops};
use serde::Deserialize;

use super::{attend_all, block_multiply_adds, heads_of, patch_projection, patches_in, peak_bytes};
use crate::model::blocks::linear::Linear;
use crate::model::blocks::norm::Norm;
use crate::model::blocks::rope::sections::rotate_halves;
use crate::model::config::Quantization;
use crate::model::error::ModelError;
use crate::model::kernels;
use crate::model::weights::Weights;

/// `vision_config`, defaulting as transformers' `PixtralVisionConfig`.
#[derive(Deserialize)]
#[serde(default)]
pub struct Args {
    hidden_size: i32,
    intermediate_size: i32,
    num_hidden_layers: i32,
    num_attention_heads: i32,
    num_channels: i32,
    patch_size: i32,
    hidden_act: String,
    head_dim: Option<i32>,
    /// The releases' spelling of the rotation's base; transformers 5 writes `rope_parameters`.
    rope_theta: Option<f32>,
    rope_parameters: Option<RopeArgs>,
}

#[derive(Deserialize)]
struct RopeArgs {
    rope_theta: Option<f32>,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            hidden_size: 1024,
            intermediate_size: 4096,
            num_hidden_layers: 24,
            num_attention_heads: 16,
            num_channels: 3,
            patch_size: 16,
            hidden_act: "gelu".into(),
            head_dim: None,
            rope_theta: None,
            rope_parameters: None,
        }
    }
}

impl Args {
    /// The peak of encoding an image of `pixels`, as [`peak_bytes`] counts a block's.
    pub fn activation_bytes(&self, pixels: u64, element_bytes: u64) -> u64 {
        let shape = [
            self.num_attention_heads,
            self.hidden_size,
            self.intermediate_size,
        ];
        peak_bytes(patches_in(pixels, self.patch_size), shape, element_bytes)
    }
}

/// The wrapper's keys the projector reads, as `Mistral3Config` defaults them.
pub struct ProjectorArgs {
    pub merge: i32,
    pub bias: bool,
    pub text_hidden: i32,
    pub text_eps: f32,
}

#[derive(Clone, Copy)]
enum Activation {
    Silu,
    Gelu,
}

pub struct Tower {
    patch_embed: Linear,
    ln_pre: Norm,
    blocks: Vec<Block>,
    activation: Activation,
    projector: Projector,
    heads: i32,
    hidden: i32,
    intermediate: i32,
    /// The rotation's inverse frequencies: the row's (even ones), then the column's (odd ones).
    row_freq: Vec<f32>,
    column_freq: Vec<f32>,
}

/// An image part-way through the tower: its hidden states before block `next_block`.
pub struct Staged {
    hidden: Array,
    cos: Array,
    sin: Array,
    grid: [i32; 2],
    pub(super) next_block: usize,
}

struct Block {
    attention_norm: Norm,
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    ffn_norm: Norm,
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

struct Projector {
    norm: Norm,
    merge: i32,
    merging: Linear,
    linear_1: Linear,
    linear_2: Linear,
}

/// Every RMSNorm of the tower.
const NORM_EPS: f32 = 1e-5;

impl Tower {
    /// The tower from `tower` (its tensors, prefix taken off) and `projector`.
    pub fn load(
        args: &Args,
        projector_args: &ProjectorArgs,
        tower: &mut Weights,
        projector: &mut Weights,
        quantization: Option<Quantization>,
        config_path: &Path,
    ) -> Result<Self, ModelError> {
        let bad = |message: String| ModelError::Config {
            path: config_path.to_path_buf(),
            message,
        };
        let activation = match args.hidden_act.as_str() {
            "silu" => Activation::Silu,
            "gelu" => Activation::Gelu,
            other => {
                return Err(bad(format!(
                    "vision_config.hidden_act {other:?}: Pixtral's tower runs silu or gelu"
                )));
            }
        };
        let (hidden, channels, patch) = (args.hidden_size, args.num_channels, args.patch_size);
        let patch_embed = Linear::Dense {
            weight: patch_projection(tower, "patch_conv.weight", [hidden, channels, patch])?,
            bias: None,
        };
        let intermediate = args.intermediate_size;
        let linear = |weights: &mut Weights, name: &str, out: i32, input: i32| {
            Linear::load(weights, name, out, input, false, quantization)
        };
        let blocks = (0..args.num_hidden_layers)
            .map(|index| {
                let prefix = format!("transformer.layers.{index}");
                let attention = |weights: &mut Weights, name: &str| {
                    linear(
                        weights,
                        &format!("{prefix}.attention.{name}"),
                        hidden,
                        hidden,
                    )
                };
                let norm = |weights: &mut Weights, name: &str| {
                    Norm::rms(
                        weights,
                        &format!("{prefix}.{name}.weight"),
                        hidden,
                        NORM_EPS,
                    )
                };
                let feed = |weights: &mut Weights, name: &str, out: i32, input: i32| {
                    linear(
                        weights,
                        &format!("{prefix}.feed_forward.{name}"),
                        out,
                        input,
                    )
                };
                Ok(Block {
                    attention_norm: norm(tower, "attention_norm")?,
                    q_proj: attention(tower, "q_proj")?,
                    k_proj: attention(tower, "k_proj")?,
                    v_proj: attention(tower, "v_proj")?,
                    o_proj: attention(tower, "o_proj")?,
                    ffn_norm: norm(tower, "ffn_norm")?,
                    gate_proj: feed(tower, "gate_proj", intermediate, hidden)?,
                    up_proj: feed(tower, "up_proj", intermediate, hidden)?,
                    down_proj: feed(tower, "down_proj", hidden, intermediate)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let ln_pre = Norm::rms(tower, "ln_pre.weight", hidden, NORM_EPS)?;
        let merge = projector_args.merge;
        let text = projector_args.text_hidden;
        let projector = Projector {
            norm: Norm::rms(projector, "norm.weight", hidden, projector_args.text_eps)?,
            merge,
            merging: linear(
                projector,
                "patch_merger.merging_layer",
                hidden,
                hidden * merge * merge,
            )?,
            linear_1: Linear::load(
                projector,
                "linear_1",
                text,
                hidden,
                projector_args.bias,
                quantization,
            )?,
            linear_2: Linear::load(
                projector,
                "linear_2",
                text,
                text,
                projector_args.bias,
                quantization,
            )?,
        };
        let heads = args.num_attention_heads;
        let head_dim = args.head_dim.unwrap_or(hidden / heads.max(1));
        let theta = args
            .rope_parameters
            .as_ref()
            .and_then(|rope| rope.rope_theta)
            .or(args.rope_theta)
            .unwrap_or(10_000.0);
        let inv_freq: Vec<f32> = (0..head_dim)
            .step_by(2)
            .map(|exponent| 1.0 / theta.powf(exponent as f32 / head_dim as f32))
            .collect();
        Ok(Self {
            patch_embed,
            ln_pre,
            blocks,
            activation,
            projector,
            heads,
            hidden,
            intermediate,
            row_freq: inv_freq.iter().copied().step_by(2).collect(),
            column_freq: inv_freq.iter().copied().skip(1).step_by(2).collect(),
        })
    }

    /// Starts one image's encoding: `patches` (`[rows · columns, patch values]`, row by row) of
    /// a `grid` of `[1, rows, columns]` patches, embedded and normalized, before the first block.
    pub fn begin(&self, patches: &Array, grid: [i32; 3]) -> Result<Staged, Exception> {
        let dtype = self.ln_pre_dtype();
        let embedded = self.patch_embed.forward(&patches.as_dtype(dtype)?)?;
        let hidden = self.ln_pre.forward(&embedded)?;
        let (cos, sin) = self.rotation([grid[1], grid[2]])?;
        Ok(Staged {
            hidden,
            cos,
            sin,
            grid: [grid[1], grid[2]],
            next_block: 0,
        })
    }

    fn ln_pre_dtype(&self) -> mlx_rs::Dtype {
        match &self.patch_embed {
            Linear::Dense { weight, .. } => weight.dtype(),
            _ => mlx_rs::Dtype::Float32,
        }
    }

    /// Runs the blocks `staged` has not run, at most `count` of them; once it has run the last,
    /// the image's text rows, `[rows / merge · columns / merge, text hidden]`.
    pub fn advance(&self, staged: &mut Staged, count: usize) -> Result<Option<Array>, Exception> {
        let end = (staged.next_block + count).min(self.blocks.len());
        for block in &self.blocks[staged.next_block..end] {
            staged.hidden = block.forward(
                &staged.hidden,
                self.heads,
                &staged.cos,
                &staged.sin,
                self.activation,
            )?;
        }
        staged.next_block = end;
        if end < self.blocks.len() {
            staged.hidden.eval()?;
            return Ok(None);
        }
        self.projector
            .forward(&staged.hidden, staged.grid)
            .map(Some)
    }

    pub fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// One block's multiply-adds over an image of `grid` patches.
    pub fn block_multiply_adds(&self, grid: [i32; 3]) -> f64 {
        block_multiply_adds(grid[1] * grid[2], self.hidden, self.intermediate)
    }

    /// The peak of encoding an image of `grid` patches.
    pub fn activation_bytes(&self, grid: [i32; 3], element_bytes: u64) -> u64 {
        let patches = u64::try_from(grid[1] * grid[2]).unwrap_or(0);
        let shape = [self.heads, self.hidden, self.intermediate];
        peak_bytes(patches, shape, element_bytes)
    }

    /// The tokens an image of `grid` patches becomes, by rows of merged patches.
    pub fn rows_and_columns(&self, grid: [i32; 3]) -> (usize, usize) {
        let merge = self.projector.merge;
        let side = |patches: i32| usize::try_from(patches / merge).unwrap_or(0);
        (side(grid[1]), side(grid[2]))
    }

    /// Each patch's rotation, `[patches, head_dim / 2]` cosines and sines: its row's angles
    /// over the even frequencies, then its column's over the odd ones.
    fn rotation(&self, [rows, columns]: [i32; 2]) -> Result<(Array, Array), Exception> {
        let angles: Vec<f32> = (0..rows)
            .flat_map(|row| (0..columns).map(move |column| (row, column)))
            .flat_map(|(row, column)| {
                let row_angles = self.row_freq.iter().map(move |freq| row as f32 * freq);
                let column_angles = self
                    .column_freq
                    .iter()
                    .map(move |freq| column as f32 * freq);
                row_angles.chain(column_angles)
            })
            .collect();
        let width = (self.row_freq.len() + self.column_freq.len()) as i32;
        let angles = Array::from_slice(&angles, &[rows * columns, width]);
        Ok((ops::cos(&angles)?, ops::sin(&angles)?))
    }
}

impl Block {
    fn forward(
        &self,
        x: &Array,
        heads: i32,
        cos: &Array,
        sin: &Array,
        activation: Activation,
    ) -> Result<Array, Exception> {
        let attended = self.attend(&self.attention_norm.forward(x)?, heads, cos, sin)?;
        let h = ops::add(x, &attended)?;
        let normed = self.ffn_norm.forward(&h)?;
        let gate = self.gate_proj.forward(&normed)?;
        let gate = match activation {
            Activation::Silu => kernels::silu(&gate)?,
            Activation::Gelu => kernels::gelu(&gate)?,
        };
        let fed = self
            .down_proj
            .forward(&ops::multiply(&gate, &self.up_proj.forward(&normed)?)?)?;
        ops::add(&h, &fed)
    }

    /// Full attention over one image's patches, each query and key rotated by its patch's row
    /// and column.
    fn attend(&self, x: &Array, heads: i32, cos: &Array, sin: &Array) -> Result<Array, Exception> {
        let split = |projection: &Linear| heads_of(projection.forward(x)?, heads);
        let queries = split(&self.q_proj)?;
        let head_dim = queries.dim(-1);
        let queries = rotate_halves(&queries, cos, sin, head_dim)?;
        let keys = rotate_halves(&split(&self.k_proj)?, cos, sin, head_dim)?;
        let output = attend_all(&queries, &keys, &split(&self.v_proj)?)?;
        self.o_proj.forward(&output)
    }
}

impl Projector {
    /// `x` (`[rows · columns, hidden]`, row by row) normalized, each `merge × merge` square of
    /// patches laid out as PyTorch's `unfold` lays it (channel by channel, then the square's
    /// rows and columns) and merged into one, then projected through the two layers with exact
    /// GELU between.
    fn forward(&self, x: &Array, [rows, columns]: [i32; 2]) -> Result<Array, Exception> {
        let (merge, hidden) = (self.merge, x.dim(-1));
        let normed = self.norm.forward(x)?;
        let squares = normed
            .reshape(&[rows / merge, merge, columns / merge, merge, hidden])?
            .transpose_axes(&[0, 2, 4, 1, 3])?
            .reshape(&[-1, hidden * merge * merge])?;
        let merged = self.merging.forward(&squares)?;
        let projected = kernels::gelu(&self.linear_1.forward(&merged)?)?;
        self.linear_2.forward(&projected)
    }
}
