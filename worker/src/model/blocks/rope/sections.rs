//! Multi-section RoPE (Qwen2-VL's M-RoPE; Qwen3-VL's and Qwen3.5's interleaved form): a token has
//! three positions, time, row and column, and each rotated pair turns by one of them, as the
//! config's `mrope_section` assigns. Text has all three equal and rotates as plain RoPE; an
//! image's tokens take their row and column in the image's grid.

use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{Array, Dtype, ops};

use super::{Rope, base_wavelengths};

impl Rope {
    /// This rotation with its pairs assigned to positions by `section` (pairs turning by time,
    /// row, column). Interleaved (Qwen3-VL, Qwen3.5), pair `i` turns by the row where
    /// `i % 3 == 1` and `i < 3 · section[1]`, by the column where `i % 3 == 2` and
    /// `i < 3 · section[2]`, else by time, as transformers assigns them; otherwise (Qwen2-VL)
    /// the sections are consecutive and cover every pair.
    pub fn with_sections(
        mut self,
        section: [i32; 3],
        interleaved: bool,
    ) -> Result<Self, Exception> {
        let pairs = self.dims / 2;
        if self.traditional || self.short.is_some() {
            return Err(Exception::from(
                "multi-section RoPE rotates halves without longrope's short factors",
            ));
        }
        if !interleaved && section.iter().sum::<i32>() != pairs {
            return Err(Exception::custom(format!(
                "mrope_section {section:?} does not cover the {pairs} rotated pairs"
            )));
        }
        let axes: Vec<i32> = (0..pairs)
            .map(|pair| axis_of_pair(pair, section, interleaved))
            .collect();
        self.sections = Some(Array::from_slice(&axes, &[pairs]));
        Ok(self)
    }

    /// `x` (`[1, heads, positions, head_dim]`) rotated at each position's own time, row and
    /// column (`positions`, `[3, positions]` int32).
    pub fn apply_at(&self, x: &Array, positions: &Array) -> Result<Array, Exception> {
        let Some(axes) = &self.sections else {
            return Err(Exception::from(
                "this rotation has no sections for an image's positions",
            ));
        };
        let x = self.scale_input(x)?;
        let wavelengths = match &self.freqs {
            Some(freqs) => freqs.clone(),
            None => base_wavelengths(self.dims, self.base)?,
        };
        // Each pair's chosen position, `[positions, pairs]`, over its wavelength.
        let chosen = positions
            .take_axis(axes, 0)?
            .as_dtype(Dtype::Float32)?
            .transpose()?;
        let angles = ops::divide(
            &ops::multiply(&chosen, Array::from_f32(self.scale))?,
            &wavelengths,
        )?;
        let (cos, sin) = (
            ops::cos(&angles)?.as_dtype(x.dtype())?,
            ops::sin(&angles)?.as_dtype(x.dtype())?,
        );
        rotate_halves(&x, &cos, &sin, self.dims)
    }
}

/// The first `dims` channels of `x` (`[.., positions, channels]`) turned in halves, pair `i`
/// being channels `i` and `i + dims/2`, by the angles whose cosines and sines are `cos` and `sin`
/// (`[positions, dims/2]`); the other channels pass.
pub(crate) fn rotate_halves(
    x: &Array,
    cos: &Array,
    sin: &Array,
    dims: i32,
) -> Result<Array, Exception> {
    let half = dims / 2;
    let first = x.index((.., .., .., ..half));
    let second = x.index((.., .., .., half..dims));
    let turned_first = ops::subtract(&ops::multiply(&first, cos)?, &ops::multiply(&second, sin)?)?;
    let turned_second = ops::add(&ops::multiply(&second, cos)?, &ops::multiply(&first, sin)?)?;
    let mut parts = vec![turned_first, turned_second];
    if dims < x.dim(-1) {
        parts.push(x.index((.., .., .., dims..)));
    }
    ops::concatenate(&parts, -1)
}

/// The position (0 time, 1 row, 2 column) rotated pair `pair` turns by.
fn axis_of_pair(pair: i32, section: [i32; 3], interleaved: bool) -> i32 {
    if interleaved {
        return match pair % 3 {
            1 if pair < 3 * section[1] => 1,
            2 if pair < 3 * section[2] => 2,
            _ => 0,
        };
    }
    match pair {
        pair if pair < section[0] => 0,
        pair if pair < section[0] + section[1] => 1,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(shape: &[i32]) -> Array {
        let count: i32 = shape.iter().product();
        let values = crate::model::spread_values(count as usize, 7);
        Array::from_slice(&values, shape)
    }

    #[test]
    fn interleaved_sections_assign_as_transformers() {
        // Qwen3.5's release: 32 pairs, [11, 11, 10].
        let axes: Vec<i32> = (0..32)
            .map(|pair| axis_of_pair(pair, [11, 11, 10], true))
            .collect();
        assert_eq!(&axes[..7], &[0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(&axes[27..], &[0, 1, 2, 0, 1]);
        assert_eq!(axes.iter().filter(|&&axis| axis == 2).count(), 10);
        let consecutive: Vec<i32> = (0..6)
            .map(|pair| axis_of_pair(pair, [2, 2, 2], false))
            .collect();
        assert_eq!(consecutive, [0, 0, 1, 1, 2, 2]);
    }

    #[test]
    fn equal_positions_rotate_as_plain_rope() {
        let rope = Rope::new(8, 10_000.0, false, None).unwrap();
        let sectioned = rope.clone().with_sections([2, 1, 1], true).unwrap();
        let x = spread(&[1, 2, 5, 12]);
        let offset = 3;
        let at: Vec<i32> = (0..3).flat_map(|_| offset..offset + 5).collect();
        let positions = Array::from_slice(&at, &[3, 5]);
        let plain = rope.apply(&x, offset).unwrap();
        let turned = sectioned.apply_at(&x, &positions).unwrap();
        let difference = ops::abs(ops::subtract(&plain, &turned).unwrap())
            .unwrap()
            .max(None)
            .unwrap()
            .item_exact::<f32>();
        assert!(difference < 1e-5, "{difference}");
    }

    #[test]
    fn a_row_position_turns_only_the_row_pairs() {
        let rope = Rope::new(8, 10_000.0, false, None)
            .unwrap()
            .with_sections([2, 1, 1], true)
            .unwrap();
        let x = spread(&[1, 1, 1, 8]);
        let still = rope
            .apply_at(&x, &Array::from_slice(&[0, 0, 0], &[3, 1]))
            .unwrap();
        let moved = rope
            .apply_at(&x, &Array::from_slice(&[0, 5, 0], &[3, 1]))
            .unwrap();
        // Pair 1 turns by the row: channels 1 and 5 change, the others stay.
        let changed: Vec<bool> = still
            .as_slice::<f32>()
            .iter()
            .zip(moved.as_slice::<f32>())
            .map(|(before, after)| before != after)
            .collect();
        assert_eq!(
            changed,
            [false, true, false, false, false, true, false, false]
        );
    }
}
