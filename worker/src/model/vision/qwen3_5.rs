//! Qwen3.5's and Qwen3.6's vision tower (transformers' `Qwen3_5VisionModel`, mlx-vlm's
//! `qwen3_5/vision.py`): patches of two frames embedded by one projection, a learned position
//! table resampled to each image's grid, blocks of full attention over the image with a 2D
//! rotation (row and column), and the merger that folds each 2x2 block of patches into one
//! token of the text model's width. The patches arrive in merge-block order (the processor's),
//! so a merged token's four patches are consecutive.

use std::path::Path;

use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{Array, Dtype, ops};
use serde::Deserialize;

use super::{ImageTokens, attend_all, block_multiply_adds, patches_in, peak_bytes};
use crate::model::blocks::linear::Linear;
use crate::model::blocks::mlp::gelu_tanh;
use crate::model::blocks::norm::Norm;
use crate::model::blocks::rope::sections::rotate_halves;
use crate::model::config::Quantization;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// `vision_config`, defaulting as transformers' `Qwen3_5VisionConfig`.
#[derive(Deserialize)]
#[serde(default)]
pub struct Args {
    depth: i32,
    hidden_size: i32,
    hidden_act: String,
    intermediate_size: i32,
    num_heads: i32,
    in_channels: i32,
    patch_size: i32,
    spatial_merge_size: i32,
    temporal_patch_size: i32,
    out_hidden_size: i32,
    num_position_embeddings: i32,
    rope_parameters: Option<RopeArgs>,
}

#[derive(Deserialize)]
struct RopeArgs {
    rope_theta: Option<f32>,
}

impl Args {
    /// The peak of encoding an image of `pixels`: one block's attention scores and
    /// probabilities over all its patches (MLX's fused attention does not take the tower's head
    /// size, so they are written out), and its hidden states, projections and MLP activations.
    pub fn activation_bytes(&self, pixels: u64, element_bytes: u64) -> u64 {
        let shape = [self.num_heads, self.hidden_size, self.intermediate_size];
        peak_bytes(patches_in(pixels, self.patch_size), shape, element_bytes)
    }
}

impl Default for Args {
    fn default() -> Self {
        Self {
            depth: 27,
            hidden_size: 1152,
            hidden_act: "gelu_pytorch_tanh".into(),
            intermediate_size: 4304,
            num_heads: 16,
            in_channels: 3,
            patch_size: 16,
            spatial_merge_size: 2,
            temporal_patch_size: 2,
            out_hidden_size: 3584,
            num_position_embeddings: 2304,
            rope_parameters: None,
        }
    }
}

/// The vision rotation's base where `rope_parameters` gives none.
const DEFAULT_ROPE_THETA: f32 = 10_000.0;
/// Every LayerNorm of the tower.
const NORM_EPS: f32 = 1e-6;

pub struct Tower {
    patch_embed: Linear,
    /// The learned positions, `[side · side, hidden]`, resampled to each grid.
    pos_embed: Array,
    side: i32,
    blocks: Vec<Block>,
    merger: Merger,
    heads: i32,
    merge: i32,
    hidden: i32,
    intermediate: i32,
    /// The 2D rotation's inverse frequencies, one per pair of a head's row half and column half.
    inv_freq: Vec<f32>,
}

/// An image part-way through the tower: its hidden states before block `next_block`.
pub struct Staged {
    hidden: Array,
    cos: Array,
    sin: Array,
    pub(super) next_block: usize,
}

struct Block {
    norm1: Norm,
    qkv: Linear,
    proj: Linear,
    norm2: Norm,
    fc1: Linear,
    fc2: Linear,
}

struct Merger {
    norm: Norm,
    fc1: Linear,
    fc2: Linear,
}

impl Tower {
    /// The tower from `weights` named as transformers names it under `model.visual.` (the
    /// prefix taken off); `channels_last` for mlx-vlm's, whose patch projection is a convolution
    /// stored `[out, time, row, column, channel]`.
    pub fn load(
        args: &Args,
        weights: &mut Weights,
        channels_last: bool,
        quantization: Option<Quantization>,
        config_path: &Path,
    ) -> Result<Self, ModelError> {
        if args.hidden_act != "gelu_pytorch_tanh" {
            return Err(ModelError::Config {
                path: config_path.to_path_buf(),
                message: format!(
                    "vision_config.hidden_act {:?}: Qwen3.5's tower runs gelu_pytorch_tanh",
                    args.hidden_act
                ),
            });
        }
        let hidden = args.hidden_size;
        let (channels, time, patch) = (args.in_channels, args.temporal_patch_size, args.patch_size);
        let patch_values = channels * time * patch * patch;
        let stored = if channels_last {
            weights.take_float(
                "patch_embed.proj.weight",
                &[hidden, time, patch, patch, channels],
            )?
        } else {
            weights.take_float(
                "patch_embed.proj.weight",
                &[hidden, channels, time, patch, patch],
            )?
        };
        let projection = if channels_last {
            stored.transpose_axes(&[0, 4, 1, 2, 3])
        } else {
            Ok(stored)
        }
        .and_then(|weight| weight.reshape(&[hidden, patch_values]))
        .map_err(|source| weights.mlx_error("flattening the patch projection", source))?;
        let patch_embed = Linear::Dense {
            weight: projection,
            bias: Some(weights.take_float("patch_embed.proj.bias", &[hidden])?),
        };
        let side = (f64::from(args.num_position_embeddings).sqrt()) as i32;
        let pos_embed = weights.take_float("pos_embed.weight", &[side * side, hidden])?;
        let linear = |weights: &mut Weights, name: &str, out: i32, input: i32| {
            Linear::load(weights, name, out, input, true, quantization)
        };
        let blocks = (0..args.depth)
            .map(|index| {
                let prefix = format!("blocks.{index}");
                Ok(Block {
                    norm1: Norm::layer(weights, &format!("{prefix}.norm1"), hidden, NORM_EPS)?,
                    qkv: linear(weights, &format!("{prefix}.attn.qkv"), 3 * hidden, hidden)?,
                    proj: linear(weights, &format!("{prefix}.attn.proj"), hidden, hidden)?,
                    norm2: Norm::layer(weights, &format!("{prefix}.norm2"), hidden, NORM_EPS)?,
                    fc1: linear(
                        weights,
                        &format!("{prefix}.mlp.linear_fc1"),
                        args.intermediate_size,
                        hidden,
                    )?,
                    fc2: linear(
                        weights,
                        &format!("{prefix}.mlp.linear_fc2"),
                        hidden,
                        args.intermediate_size,
                    )?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let merged = hidden * args.spatial_merge_size * args.spatial_merge_size;
        let merger = Merger {
            norm: Norm::layer(weights, "merger.norm", hidden, NORM_EPS)?,
            fc1: linear(weights, "merger.linear_fc1", merged, merged)?,
            fc2: linear(weights, "merger.linear_fc2", args.out_hidden_size, merged)?,
        };
        let head_dim = hidden / args.num_heads;
        let theta = args
            .rope_parameters
            .as_ref()
            .and_then(|rope| rope.rope_theta)
            .unwrap_or(DEFAULT_ROPE_THETA);
        // transformers' axial rotation: `head_dim / 2` channels per axis, a frequency per pair.
        let spatial = head_dim / 2;
        let inv_freq = (0..spatial)
            .step_by(2)
            .map(|exponent| 1.0 / theta.powf(exponent as f32 / spatial as f32))
            .collect();
        Ok(Self {
            patch_embed,
            pos_embed,
            side,
            blocks,
            merger,
            heads: args.num_heads,
            merge: args.spatial_merge_size,
            hidden,
            intermediate: args.intermediate_size,
            inv_freq,
        })
    }

    /// Starts one image's encoding: `patches` (`[t·h·w, patch values]`, merge-block order) of
    /// a `grid` of `[t, h, w]` patches embedded and placed, before the first block.
    pub fn begin(&self, patches: &Array, grid: [i32; 3]) -> Result<Staged, Exception> {
        let dtype = self.pos_embed.dtype();
        let embedded = self.patch_embed.forward(&patches.as_dtype(dtype)?)?;
        let hidden = ops::add(&embedded, &self.positions(grid)?)?;
        let (cos, sin) = self.rotation(grid)?;
        Ok(Staged {
            hidden,
            cos,
            sin,
            next_block: 0,
        })
    }

    /// Runs the blocks `staged` has not run, at most `count` of them; once it has run the last,
    /// the image's text rows, `[t·h·w / merge², text hidden]`.
    pub fn advance(&self, staged: &mut Staged, count: usize) -> Result<Option<Array>, Exception> {
        let end = (staged.next_block + count).min(self.blocks.len());
        for block in &self.blocks[staged.next_block..end] {
            staged.hidden = block.forward(&staged.hidden, self.heads, &staged.cos, &staged.sin)?;
        }
        staged.next_block = end;
        if end < self.blocks.len() {
            staged.hidden.eval()?;
            return Ok(None);
        }
        self.merger.forward(&staged.hidden, self.merge).map(Some)
    }

    pub fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// One block's multiply-adds over an image of `grid` patches.
    pub fn block_multiply_adds(&self, grid: [i32; 3]) -> f64 {
        block_multiply_adds(grid[0] * grid[1] * grid[2], self.hidden, self.intermediate)
    }

    /// The peak of encoding an image of `grid` patches, as `Args::activation_bytes`.
    pub fn activation_bytes(&self, grid: [i32; 3], element_bytes: u64) -> u64 {
        let patches = u64::try_from(grid[0] * grid[1] * grid[2]).unwrap_or(0);
        let shape = [self.heads, self.hidden, self.intermediate];
        peak_bytes(patches, shape, element_bytes)
    }

    /// The rows the tower gives an image of `grid` patches: one per merged block.
    pub fn rows(&self, grid: [i32; 3]) -> usize {
        usize::try_from(grid[0] * (grid[1] / self.merge) * (grid[2] / self.merge)).unwrap_or(0)
    }

    /// The image tokens the text gets for a `grid` of patches, with their positions: one per
    /// merged block, at (0, row, column) of the merged grid; the text after the image goes on
    /// from its longest side (transformers' `get_rope_index`).
    pub fn image_tokens(&self, grid: [i32; 3]) -> ImageTokens {
        let [time, rows, columns] = [grid[0], grid[1] / self.merge, grid[2] / self.merge];
        let positions = (0..time)
            .flat_map(|t| {
                (0..rows).flat_map(move |row| (0..columns).map(move |column| [t, row, column]))
            })
            .collect();
        ImageTokens {
            positions,
            advance: rows.max(columns),
        }
    }

    /// Each patch's (row, column) in merge-block order, as the processor lays patches out.
    fn patch_coordinates(&self, grid: [i32; 3]) -> Vec<(i32, i32)> {
        let [time, rows, columns] = grid;
        let merge = self.merge;
        let one_frame: Vec<(i32, i32)> = (0..rows / merge)
            .flat_map(|block_row| {
                (0..columns / merge).flat_map(move |block_column| {
                    (0..merge).flat_map(move |row| {
                        (0..merge).map(move |column| {
                            (block_row * merge + row, block_column * merge + column)
                        })
                    })
                })
            })
            .collect();
        (0..time).flat_map(|_| one_frame.iter().copied()).collect()
    }

    /// The learned positions resampled to `grid` bilinearly with aligned corners, as
    /// transformers' `get_vision_interpolation_indices_and_weights`: four taps per patch.
    fn positions(&self, grid: [i32; 3]) -> Result<Array, Exception> {
        let side = self.side;
        let taps = |index: i32, size: i32| -> [(i32, f32); 2] {
            let source = index as f32 * (side - 1) as f32 / (size - 1).max(1) as f32;
            let floor = source.floor();
            std::array::from_fn(|offset| {
                let tap = (floor as i32 + offset as i32).clamp(0, side - 1);
                let weight = (1.0 - (source - floor - offset as f32).abs()).max(0.0);
                (tap, weight)
            })
        };
        let coordinates = self.patch_coordinates(grid);
        let mut indices = Vec::with_capacity(coordinates.len() * 4);
        let mut weights = Vec::with_capacity(coordinates.len() * 4);
        for (row, column) in coordinates {
            for (row_tap, row_weight) in taps(row, grid[1]) {
                for (column_tap, column_weight) in taps(column, grid[2]) {
                    indices.push(row_tap * side + column_tap);
                    weights.push(row_weight * column_weight);
                }
            }
        }
        let patches = (indices.len() / 4) as i32;
        let gathered = self
            .pos_embed
            .take_axis(Array::from_slice(&indices, &[patches, 4]), 0)?;
        let weights = Array::from_slice(&weights, &[patches, 4, 1]).as_dtype(gathered.dtype())?;
        ops::multiply(&gathered, &weights)?.sum_axis(1, false)
    }

    /// The 2D rotation's cosines and sines per patch, `[patches, head_dim / 2]`: the row's
    /// angles, then the column's.
    fn rotation(&self, grid: [i32; 3]) -> Result<(Array, Array), Exception> {
        let coordinates = self.patch_coordinates(grid);
        let angles: Vec<f32> = coordinates
            .iter()
            .flat_map(|&(row, column)| {
                let row_angles = self.inv_freq.iter().map(move |freq| row as f32 * freq);
                let column_angles = self.inv_freq.iter().map(move |freq| column as f32 * freq);
                row_angles.chain(column_angles)
            })
            .collect();
        let angles = Array::from_slice(
            &angles,
            &[coordinates.len() as i32, 2 * self.inv_freq.len() as i32],
        );
        Ok((ops::cos(&angles)?, ops::sin(&angles)?))
    }
}

impl Block {
    fn forward(&self, x: &Array, heads: i32, cos: &Array, sin: &Array) -> Result<Array, Exception> {
        let attended = self.attend(&self.norm1.forward(x)?, heads, cos, sin)?;
        let h = ops::add(x, &attended)?;
        let fed = self
            .fc2
            .forward(&gelu_tanh(&self.fc1.forward(&self.norm2.forward(&h)?)?)?)?;
        ops::add(&h, &fed)
    }

    /// Full attention over one image's patches, rotated in float32 as transformers rotates.
    fn attend(&self, x: &Array, heads: i32, cos: &Array, sin: &Array) -> Result<Array, Exception> {
        let patches = x.dim(0);
        let qkv = self.qkv.forward(x)?.reshape(&[patches, 3, heads, -1])?;
        let head_dim = qkv.dim(-1);
        let part = |index: i32| qkv.index((.., index, .., ..)).transpose_axes(&[1, 0, 2]);
        let rotate = |x: Array| -> Result<Array, Exception> {
            let turned = rotate_halves(
                &x.as_dtype(Dtype::Float32)?.expand_dims(0)?,
                cos,
                sin,
                head_dim,
            )?;
            turned.as_dtype(x.dtype())
        };
        let queries = rotate(part(0)?)?;
        let keys = rotate(part(1)?)?;
        let values = part(2)?.expand_dims(0)?;
        self.proj.forward(&attend_all(&queries, &keys, &values)?)
    }
}

impl Merger {
    /// Each patch normalized, then each run of `merge²` patches (one merged block) as one row
    /// through the two-layer MLP with exact GELU.
    fn forward(&self, x: &Array, merge: i32) -> Result<Array, Exception> {
        let normed = self.norm.forward(x)?;
        let width = normed.dim(-1) * merge * merge;
        let grouped = normed.reshape(&[-1, width])?;
        let hidden = self.fc1.forward(&grouped)?;
        self.fc2.forward(&gelu(&hidden)?)
    }
}

/// `x/2 · (1 + erf(x/√2))`, PyTorch's exact `GELU`.
fn gelu(x: &Array) -> Result<Array, Exception> {
    let constant = |value: f32| Array::from_f32(value).as_dtype(x.dtype());
    let erf = ops::erf(&ops::multiply(
        x,
        &constant(std::f32::consts::FRAC_1_SQRT_2)?,
    )?)?;
    ops::multiply(
        &ops::multiply(x, &constant(0.5)?)?,
        &ops::add(&constant(1.0)?, &erf)?,
    )
}
