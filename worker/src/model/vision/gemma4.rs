//! Gemma 4's vision tower (transformers' `Gemma4VisionModel` and `Gemma4MultimodalEmbedder`,
//! mlx-vlm's `gemma4/vision.py`): patches of any grid centred and embedded by one projection,
//! placed by a learned table per axis (column and row), blocks of unscaled full attention with
//! RMSNorms over each query, key and value head and a 2D rotation (the first half of a head
//! turns by the patch's column, the second by its row), norms around both halves of a block as
//! the text model has them, a GeGLU MLP; then each square of patches averaged into one token,
//! scaled by the width's root and, where the checkpoint says so, standardized; then normalized
//! without a weight and projected to the text model's width.

use std::path::Path;

use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{Array, ops};
use serde::Deserialize;

use super::{attend_all_scaled, block_multiply_adds, heads_of, patches_in, peak_bytes};
use crate::model::blocks::linear::Linear;
use crate::model::blocks::mlp::gelu_tanh;
use crate::model::blocks::norm::Norm;
use crate::model::blocks::rope::sections::rotate_halves;
use crate::model::config::Quantization;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// `vision_config`, defaulting as transformers' `Gemma4VisionConfig`.
#[derive(Deserialize)]
#[serde(default)]
pub struct Args {
    hidden_size: i32,
    intermediate_size: i32,
    num_hidden_layers: i32,
    num_attention_heads: i32,
    num_key_value_heads: i32,
    head_dim: i32,
    hidden_activation: String,
    rms_norm_eps: f32,
    rope_parameters: Option<RopeArgs>,
    pooling_kernel_size: i32,
    patch_size: i32,
    position_embedding_size: i32,
    use_clipped_linears: bool,
    standardize: bool,
}

#[derive(Deserialize)]
struct RopeArgs {
    rope_theta: Option<f32>,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 16,
            num_attention_heads: 12,
            num_key_value_heads: 12,
            head_dim: 64,
            hidden_activation: "gelu_pytorch_tanh".into(),
            rms_norm_eps: 1e-6,
            rope_parameters: None,
            pooling_kernel_size: 3,
            patch_size: 16,
            position_embedding_size: 10 * 1024,
            use_clipped_linears: false,
            standardize: false,
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

pub struct Tower {
    input_proj: Linear,
    /// `[2, positions, hidden]`: a patch's column's embedding, then its row's.
    position_table: Array,
    blocks: Vec<Block>,
    /// `(x - bias) · scale` on the pooled tokens, where the checkpoint standardizes them.
    standardize: Option<(Array, Array)>,
    projection_norm: Norm,
    projection: Linear,
    /// Each rotated pair's frequency, for one half of a head.
    frequencies: Vec<f32>,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    hidden: i32,
    intermediate: i32,
    pooling: i32,
}

/// An image part-way through the tower: its hidden states before block `next_block`, and its
/// patches' rotation by column and by row.
pub struct Staged {
    hidden: Array,
    columns: (Array, Array),
    rows: (Array, Array),
    grid: [i32; 2],
    pub(super) next_block: usize,
}

/// transformers' `Gemma4ClippableLinear`: a projection whose input and output are clamped to the
/// checkpoint's bounds where the tower has them.
struct ClippedLinear {
    linear: Linear,
    /// Input and output bounds, `(min, max)` each.
    bounds: Option<[(Array, Array); 2]>,
}

struct Block {
    input_norm: Norm,
    q_proj: ClippedLinear,
    k_proj: ClippedLinear,
    v_proj: ClippedLinear,
    o_proj: ClippedLinear,
    q_norm: Norm,
    k_norm: Norm,
    v_norm: Norm,
    post_attention_norm: Norm,
    pre_feedforward_norm: Norm,
    gate_proj: ClippedLinear,
    up_proj: ClippedLinear,
    down_proj: ClippedLinear,
    post_feedforward_norm: Norm,
}

impl Tower {
    /// The tower from `tower` (its tensors, the prefix taken off) and `embedder` (the
    /// embedder's), for a text model `text_hidden` wide.
    pub fn load(
        args: &Args,
        tower: &mut Weights,
        embedder: &mut Weights,
        text_hidden: i32,
        quantization: Option<Quantization>,
        config_path: &Path,
    ) -> Result<Self, ModelError> {
        let bad = |message: String| ModelError::Config {
            path: config_path.to_path_buf(),
            message,
        };
        if args.hidden_activation != "gelu_pytorch_tanh" {
            return Err(bad(format!(
                "vision_config.hidden_activation {:?}: Gemma 4's tower runs gelu_pytorch_tanh",
                args.hidden_activation
            )));
        }
        if args.head_dim % 4 != 0 || args.pooling_kernel_size < 1 {
            return Err(bad(
                "vision_config: head_dim must be a multiple of 4 (two rotated halves) and \
                 pooling_kernel_size positive"
                    .into(),
            ));
        }
        let (hidden, head_dim, eps) = (args.hidden_size, args.head_dim, args.rms_norm_eps);
        let (heads, kv_heads) = (args.num_attention_heads, args.num_key_value_heads);
        let patch_values = 3 * args.patch_size * args.patch_size;
        let input_proj = Linear::load(
            tower,
            "patch_embedder.input_proj",
            hidden,
            patch_values,
            false,
            quantization,
        )?;
        let position_table = tower.take_float(
            "patch_embedder.position_embedding_table",
            &[2, args.position_embedding_size, hidden],
        )?;
        let clipped = args.use_clipped_linears;
        let linear = |weights: &mut Weights, name: &str, out: i32, input: i32| {
            ClippedLinear::load(weights, name, out, input, clipped, quantization)
        };
        let intermediate = args.intermediate_size;
        let blocks = (0..args.num_hidden_layers)
            .map(|index| {
                let prefix = format!("encoder.layers.{index}");
                let attention = format!("{prefix}.self_attn");
                let mlp = format!("{prefix}.mlp");
                let norm = |weights: &mut Weights, name: &str, size: i32| {
                    Norm::rms(weights, &format!("{prefix}.{name}.weight"), size, eps)
                };
                Ok(Block {
                    input_norm: norm(tower, "input_layernorm", hidden)?,
                    q_proj: linear(
                        tower,
                        &format!("{attention}.q_proj"),
                        heads * head_dim,
                        hidden,
                    )?,
                    k_proj: linear(
                        tower,
                        &format!("{attention}.k_proj"),
                        kv_heads * head_dim,
                        hidden,
                    )?,
                    v_proj: linear(
                        tower,
                        &format!("{attention}.v_proj"),
                        kv_heads * head_dim,
                        hidden,
                    )?,
                    o_proj: linear(
                        tower,
                        &format!("{attention}.o_proj"),
                        hidden,
                        heads * head_dim,
                    )?,
                    q_norm: norm(tower, "self_attn.q_norm", head_dim)?,
                    k_norm: norm(tower, "self_attn.k_norm", head_dim)?,
                    v_norm: Norm::RmsUnweighted { eps },
                    post_attention_norm: norm(tower, "post_attention_layernorm", hidden)?,
                    pre_feedforward_norm: norm(tower, "pre_feedforward_layernorm", hidden)?,
                    gate_proj: linear(tower, &format!("{mlp}.gate_proj"), intermediate, hidden)?,
                    up_proj: linear(tower, &format!("{mlp}.up_proj"), intermediate, hidden)?,
                    down_proj: linear(tower, &format!("{mlp}.down_proj"), hidden, intermediate)?,
                    post_feedforward_norm: norm(tower, "post_feedforward_layernorm", hidden)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let standardize = if args.standardize {
            Some((
                tower.take_float("std_bias", &[hidden])?,
                tower.take_float("std_scale", &[hidden])?,
            ))
        } else {
            None
        };
        let projection = Linear::load(
            embedder,
            "embedding_projection",
            text_hidden,
            hidden,
            false,
            quantization,
        )?;
        // transformers' `compute_axial_rope_parameters`: a half head's pairs over its width.
        let theta = args
            .rope_parameters
            .as_ref()
            .and_then(|rope| rope.rope_theta)
            .unwrap_or(100.0);
        let half = head_dim / 2;
        let frequencies = (0..half / 2)
            .map(|pair| 1.0 / theta.powf((2 * pair) as f32 / half as f32))
            .collect();
        Ok(Self {
            input_proj,
            position_table,
            blocks,
            standardize,
            projection_norm: Norm::RmsUnweighted { eps },
            projection,
            frequencies,
            heads,
            kv_heads,
            head_dim,
            hidden,
            intermediate,
            pooling: args.pooling_kernel_size,
        })
    }

    /// Starts one image's encoding: its `patches` (`[rows · columns, values]`, each patch's
    /// pixels in [0, 1] row by row with their channels) centred, embedded and placed, before
    /// the first block.
    pub fn begin(&self, patches: &Array, grid: [i32; 3]) -> Result<Staged, Exception> {
        let [_, rows, columns] = grid;
        let dtype = self.position_table.dtype();
        // transformers' `2 · (pixels - 0.5)`: the processor leaves the values in [0, 1].
        let centred = ops::multiply(
            &ops::subtract(&patches.as_dtype(dtype)?, Array::from_f32(0.5))?,
            Array::from_f32(2.0),
        )?;
        let column_ids: Vec<i32> = (0..rows).flat_map(|_| 0..columns).collect();
        let row_ids: Vec<i32> = (0..rows)
            .flat_map(|row| (0..columns).map(move |_| row))
            .collect();
        let patches_count = rows * columns;
        let column_ids = Array::from_slice(&column_ids, &[patches_count]);
        let row_ids = Array::from_slice(&row_ids, &[patches_count]);
        let placed = ops::add(
            &self.position_table.index(0).take_axis(&column_ids, 0)?,
            &self.position_table.index(1).take_axis(&row_ids, 0)?,
        )?;
        let hidden = ops::add(&self.input_proj.forward(&centred)?, &placed)?;
        Ok(Staged {
            hidden,
            columns: self.rotation(&column_ids)?,
            rows: self.rotation(&row_ids)?,
            grid: [rows, columns],
            next_block: 0,
        })
    }

    /// Runs the blocks `staged` has not run, at most `count` of them; once it has run the last,
    /// the image's text rows, `[tokens, text hidden]`.
    pub fn advance(&self, staged: &mut Staged, count: usize) -> Result<Option<Array>, Exception> {
        let end = (staged.next_block + count).min(self.blocks.len());
        for block in &self.blocks[staged.next_block..end] {
            staged.hidden = block.forward(&staged.hidden, self, &staged.columns, &staged.rows)?;
        }
        staged.next_block = end;
        if end < self.blocks.len() {
            staged.hidden.eval()?;
            return Ok(None);
        }
        self.pool_and_project(&staged.hidden, staged.grid).map(Some)
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

    /// The tokens an image of `grid` patches becomes: one per pooling square.
    pub fn rows(&self, grid: [i32; 3]) -> usize {
        let squares = (grid[1] / self.pooling) * (grid[2] / self.pooling);
        usize::try_from(squares).unwrap_or(0)
    }

    /// The cosines and sines of each patch's angles at `positions` (`[patches]`), one per
    /// rotated pair of a half head.
    fn rotation(&self, positions: &Array) -> Result<(Array, Array), Exception> {
        let pairs = self.frequencies.len() as i32;
        let frequencies = Array::from_slice(&self.frequencies, &[1, pairs]);
        let angles = ops::multiply(
            &positions
                .as_dtype(mlx_rs::Dtype::Float32)?
                .reshape(&[-1, 1])?,
            &frequencies,
        )?;
        let dtype = self.position_table.dtype();
        Ok((
            ops::cos(&angles)?.as_dtype(dtype)?,
            ops::sin(&angles)?.as_dtype(dtype)?,
        ))
    }

    /// `hidden` (`[rows · columns, hidden]`) averaged over each pooling square, scaled by the
    /// width's root in float32, standardized where the tower does, normalized and projected.
    fn pool_and_project(
        &self,
        hidden: &Array,
        [rows, columns]: [i32; 2],
    ) -> Result<Array, Exception> {
        let (pool, width) = (self.pooling, hidden.dim(-1));
        let pooled = hidden
            .as_dtype(mlx_rs::Dtype::Float32)?
            .reshape(&[rows / pool, pool, columns / pool, pool, width])?
            .mean_axes(&[1, 3], false)?
            .reshape(&[-1, width])?;
        let mut pooled = ops::multiply(&pooled, Array::from_f32((width as f32).sqrt()))?;
        if let Some((bias, scale)) = &self.standardize {
            pooled = ops::multiply(&ops::subtract(&pooled, bias)?, scale)?;
        }
        let pooled = pooled.as_dtype(hidden.dtype())?;
        self.projection
            .forward(&self.projection_norm.forward(&pooled)?)
    }
}

impl Block {
    fn forward(
        &self,
        x: &Array,
        tower: &Tower,
        columns: &(Array, Array),
        rows: &(Array, Array),
    ) -> Result<Array, Exception> {
        let attended = self.attend(&self.input_norm.forward(x)?, tower, columns, rows)?;
        let h = ops::add(x, &self.post_attention_norm.forward(&attended)?)?;
        let normed = self.pre_feedforward_norm.forward(&h)?;
        let gated = ops::multiply(
            &gelu_tanh(&self.gate_proj.forward(&normed)?)?,
            &self.up_proj.forward(&normed)?,
        )?;
        let fed = self.down_proj.forward(&gated)?;
        ops::add(&h, &self.post_feedforward_norm.forward(&fed)?)
    }

    /// Unscaled full attention over one image's patches, each query and key head normalized
    /// and turned by its patch's column (first half) and row (second half), each value head
    /// normalized.
    fn attend(
        &self,
        x: &Array,
        tower: &Tower,
        columns: &(Array, Array),
        rows: &(Array, Array),
    ) -> Result<Array, Exception> {
        let kv_heads = tower.kv_heads;
        let turned = |projection: &ClippedLinear, norm: &Norm, heads: i32| {
            let split = norm.forward(&heads_of(projection.forward(x)?, heads)?)?;
            turn_by_position(&split, columns, rows, tower.head_dim)
        };
        let queries = turned(&self.q_proj, &self.q_norm, tower.heads)?;
        let keys = turned(&self.k_proj, &self.k_norm, kv_heads)?;
        let values = self
            .v_norm
            .forward(&heads_of(self.v_proj.forward(x)?, kv_heads)?)?;
        let output = attend_all_scaled(&queries, &keys, &values, 1.0)?;
        self.o_proj.forward(&output)
    }
}

/// `x` (`[1, heads, patches, head_dim]`) with its first half turned by the patches' columns and
/// its second by their rows, each half in halves as transformers' `rotate_half` pairs them.
fn turn_by_position(
    x: &Array,
    (column_cos, column_sin): &(Array, Array),
    (row_cos, row_sin): &(Array, Array),
    head_dim: i32,
) -> Result<Array, Exception> {
    let half = head_dim / 2;
    let first = rotate_halves(&x.index((.., .., .., ..half)), column_cos, column_sin, half)?;
    let second = rotate_halves(&x.index((.., .., .., half..)), row_cos, row_sin, half)?;
    ops::concatenate(&[first, second], -1)
}

impl ClippedLinear {
    fn load(
        weights: &mut Weights,
        prefix: &str,
        out: i32,
        input: i32,
        clipped: bool,
        quantization: Option<Quantization>,
    ) -> Result<Self, ModelError> {
        let linear = Linear::load(
            weights,
            &format!("{prefix}.linear"),
            out,
            input,
            false,
            quantization,
        )?;
        let bounds = if clipped {
            let mut bound = |name: &str| weights.take_float(&format!("{prefix}.{name}"), &[]);
            Some([
                (bound("input_min")?, bound("input_max")?),
                (bound("output_min")?, bound("output_max")?),
            ])
        } else {
            None
        };
        Ok(Self { linear, bounds })
    }

    fn forward(&self, x: &Array) -> Result<Array, Exception> {
        let Some([(input_min, input_max), (output_min, output_max)]) = &self.bounds else {
            return self.linear.forward(x);
        };
        let clamped = ops::clip(x, (input_min, input_max))?;
        ops::clip(&self.linear.forward(&clamped)?, (output_min, output_max))
    }
}
