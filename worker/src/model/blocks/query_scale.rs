//! Queries multiplied by a factor of their absolute position after the rotation, as
//! Ministral 3's `llama_4_scaling_beta` and Llama 4's attention temperature do, so attention
//! sharpens over long contexts.

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype, ops};

#[derive(Clone, Copy)]
pub enum QueryScale {
    /// `1 + beta · ln(1 + floor(position / original_max_position_embeddings))`.
    Llama4 {
        beta: f32,
        original_max_position_embeddings: f32,
    },
    /// `1 + scale · ln(1 + floor((position + 1) / floor_scale))` (Llama 4's NoPE layers).
    Temperature { floor_scale: f32, scale: f32 },
}

impl QueryScale {
    /// `queries` (`[1, heads, positions, head_dim]`) whose first position is `offset`.
    pub fn apply(&self, queries: &Array, offset: i32) -> Result<Array, Exception> {
        let length = queries.dim(2);
        let positions =
            ops::arange::<i32, f32>(offset, offset + length, 1)?.reshape(&[length, 1])?;
        self.multiply(queries, &positions)
    }

    /// `queries` (`[rows, heads, 1, head_dim]`), row `i` at position `offsets[i]`.
    pub fn apply_rows(&self, queries: &Array, offsets: &Array) -> Result<Array, Exception> {
        let positions = offsets.as_dtype(Dtype::Float32)?.reshape(&[-1, 1, 1, 1])?;
        self.multiply(queries, &positions)
    }

    /// The factors computed in f32 with mlx-lm's ops, and their product with the queries in
    /// mlx-lm's dtypes.
    fn multiply(&self, queries: &Array, positions: &Array) -> Result<Array, Exception> {
        let one = || Array::from_f32(1.0);
        match *self {
            Self::Llama4 {
                beta,
                original_max_position_embeddings,
            } => {
                let windows = ops::floor(&ops::divide(
                    positions,
                    Array::from_f32(original_max_position_embeddings),
                )?)?;
                let growth = ops::log(&ops::add(one(), &windows)?)?;
                let factors = ops::add(one(), &ops::multiply(Array::from_f32(beta), &growth)?)?;
                ops::multiply(queries, &factors.as_dtype(queries.dtype())?)
            }
            Self::Temperature { floor_scale, scale } => {
                let floors = ops::floor(&ops::divide(
                    &ops::add(positions, one())?,
                    Array::from_f32(floor_scale),
                )?)?;
                let growth = ops::log(&ops::add(&floors, one())?)?;
                let factors = ops::add(&ops::multiply(&growth, Array::from_f32(scale))?, one())?;
                // Multiplied in f32 and cast back, where Ministral's factors are cast first.
                ops::multiply(queries, &factors)?.as_dtype(queries.dtype())
            }
        }
    }
}
