//! The types MLX cannot hold as they are, dequantized in Rust and quantized again by MLX
//! (affine, groups of 32), a few rows at a time so the f32 copy stays small.

use std::fmt;

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype, ops};

use super::groups::GROUP;

/// What a requantized type becomes; `[models.ID] gguf_requantize` in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Requantize {
    /// Affine 8-bit: within 0.5% of llama.cpp's values for every requantized type (measured in
    /// `blocks/tests.rs`), at 8 bits per value plus the group's f16 scale and bias.
    #[default]
    Bits8,
    /// Affine 6-bit: a quarter smaller, errors of 1-2%.
    Bits6,
    /// Plain float16: llama.cpp's values rounded to f16, at 16 bits per value.
    F16,
}

impl Requantize {
    pub const NAMES: [&str; 3] = ["8bit", "6bit", "f16"];
    pub const ALL: [Self; 3] = [Self::Bits8, Self::Bits6, Self::F16];

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "8bit" => Some(Self::Bits8),
            "6bit" => Some(Self::Bits6),
            "f16" => Some(Self::F16),
            _ => None,
        }
    }

    /// The affine bits, or `None` for float16.
    pub fn bits(self) -> Option<i32> {
        match self {
            Self::Bits8 => Some(8),
            Self::Bits6 => Some(6),
            Self::F16 => None,
        }
    }
}

impl fmt::Display for Requantize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Bits8 => "8bit",
            Self::Bits6 => "6bit",
            Self::F16 => "f16",
        })
    }
}

/// Values per chunk handed to MLX: 16 MiB of f32.
const CHUNK_VALUES: usize = 1 << 22;

/// Quantizes rows of `columns` values, `dequantize` filling each chunk of rows: one array for
/// float16, or the packed weight, scales and biases.
pub fn requantize(
    rows: usize,
    columns: usize,
    bits: Option<i32>,
    mut dequantize: impl FnMut(std::ops::Range<usize>, &mut [f32]),
) -> Result<Vec<Array>, Exception> {
    let chunk_rows = (CHUNK_VALUES / columns.max(1)).max(1);
    let mut parts: Vec<Vec<Array>> = Vec::new();
    let mut values = Vec::new();
    let mut row = 0;
    while row < rows {
        let end = (row + chunk_rows).min(rows);
        values.resize((end - row) * columns, 0.0);
        dequantize(row..end, &mut values);
        let array = Array::from_slice(&values, &[(end - row) as i32, columns as i32]);
        let part = match bits {
            None => vec![array.as_dtype(Dtype::Float16)?],
            Some(bits) => {
                let (weight, scales, biases) = ops::quantize(&array, GROUP as i32, bits)?;
                vec![weight, scales, biases]
            }
        };
        mlx_rs::transforms::eval(&part)?;
        parts.push(part);
        row = end;
    }
    let count = parts.first().map_or(0, Vec::len);
    (0..count)
        .map(|index| {
            let pieces: Vec<&Array> = parts.iter().map(|part| &part[index]).collect();
            if pieces.len() == 1 {
                Ok(pieces[0].clone())
            } else {
                ops::concatenate(&pieces, 0)
            }
        })
        .collect()
}
