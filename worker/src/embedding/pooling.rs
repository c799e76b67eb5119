//! Token vectors to one vector per input: mean over real tokens, the first (`[CLS]`) token, or
//! the last real token; then L2 normalization when the model's layout asks for it. Runs on the
//! engine thread; the pooled rows come back to the host as `f32`.

use mlx_rs::error::Exception;
use mlx_rs::ops;
use mlx_rs::{Array, Dtype};

use super::layout::Pooling;

/// Pools `hidden` (`[rows, width, dim]`, right-padded; `lengths` real tokens per row) into
/// `[rows, dim]` in `f32`.
pub fn pool(hidden: &Array, lengths: &[usize], pooling: Pooling) -> Result<Array, Exception> {
    let hidden = hidden.as_dtype(Dtype::Float32)?;
    let (rows, width, dim) = (hidden.dim(0), hidden.dim(1), hidden.dim(2));
    match pooling {
        Pooling::Mean => {
            let mask: Vec<f32> = lengths
                .iter()
                .flat_map(|&length| {
                    (0..width as usize).map(move |column| f32::from(column < length))
                })
                .collect();
            let mask = Array::from_slice(&mask, &[rows, width, 1]);
            let counts: Vec<f32> = lengths.iter().map(|&length| length.max(1) as f32).collect();
            let counts = Array::from_slice(&counts, &[rows, 1]);
            ops::divide(&ops::multiply(&hidden, &mask)?.sum_axis(1, false)?, &counts)
        }
        Pooling::Cls => gather(&hidden, &vec![0; rows as usize], dim),
        Pooling::LastToken => {
            let last: Vec<i32> = lengths
                .iter()
                .map(|&length| length.saturating_sub(1) as i32)
                .collect();
            gather(&hidden, &last, dim)
        }
    }
}

/// Row `r`'s vector at position `positions[r]`: `[rows, dim]`.
fn gather(hidden: &Array, positions: &[i32], dim: i32) -> Result<Array, Exception> {
    let rows = positions.len() as i32;
    let indices = Array::from_slice(positions, &[rows, 1, 1]);
    let indices = ops::broadcast_to(&indices, &[rows, 1, dim])?;
    hidden.take_along_axis(&indices, 1)?.reshape(&[rows, dim])
}

/// Each row divided by its L2 norm (at least 1e-12, as `torch.nn.functional.normalize`).
pub fn normalize(rows: &Array) -> Result<Array, Exception> {
    let norms = rows.square()?.sum_axis(-1, true)?.sqrt()?;
    ops::divide(rows, &ops::maximum(&norms, Array::from_f32(1e-12))?)
}

/// The first `dimensions` components of `vector`, normalized again (Matryoshka truncation).
pub fn truncate_dimensions(vector: &[f32], dimensions: usize) -> Vec<f32> {
    let kept = &vector[..dimensions.min(vector.len())];
    let norm = kept.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    kept.iter().map(|x| x / norm).collect()
}

/// `[rows, dim]` f32 on the host.
pub fn to_host_rows(rows: &Array) -> Result<Vec<Vec<f32>>, Exception> {
    let rows = rows.as_dtype(Dtype::Float32)?;
    rows.eval()?;
    let dim = rows.dim(1).max(1) as usize;
    let values = rows
        .try_as_slice::<f32>()
        .map_err(|error| Exception::custom(error.to_string()))?;
    Ok(values.chunks(dim).map(<[f32]>::to_vec).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hidden() -> Array {
        // Two rows of three positions, dim 2; row 1 has one real token.
        Array::from_slice(
            &[
                1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 100.0, 100.0, 100.0, 100.0,
            ],
            &[2, 3, 2],
        )
    }

    #[test]
    fn mean_ignores_padding() {
        let pooled = to_host_rows(&pool(&hidden(), &[3, 1], Pooling::Mean).unwrap()).unwrap();
        assert_eq!(pooled, vec![vec![3.0, 4.0], vec![7.0, 8.0]]);
    }

    #[test]
    fn cls_and_last_token_pick_their_positions() {
        let cls = to_host_rows(&pool(&hidden(), &[3, 1], Pooling::Cls).unwrap()).unwrap();
        assert_eq!(cls, vec![vec![1.0, 2.0], vec![7.0, 8.0]]);
        let last = to_host_rows(&pool(&hidden(), &[2, 1], Pooling::LastToken).unwrap()).unwrap();
        assert_eq!(last, vec![vec![3.0, 4.0], vec![7.0, 8.0]]);
    }

    #[test]
    fn normalized_rows_have_unit_length_and_truncation_renormalizes() {
        let rows = Array::from_slice(&[3.0f32, 4.0, 0.0, 0.0], &[2, 2]);
        let normalized = to_host_rows(&normalize(&rows).unwrap()).unwrap();
        assert_eq!(normalized, vec![vec![0.6, 0.8], vec![0.0, 0.0]]);
        assert_eq!(truncate_dimensions(&[0.6, 0.8], 1), vec![1.0]);
    }
}
