//! ggml's tensor types: how many bytes a block of values takes, and which of them are served.

use std::fmt;

/// A tensor type id as stored in a GGUF tensor info.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GgmlType(pub u32);

/// How a type is stored: `block_values` values take `block_bytes` bytes.
struct Layout {
    name: &'static str,
    block_values: u64,
    block_bytes: u64,
}

impl GgmlType {
    pub const F32: Self = Self(0);
    pub const F16: Self = Self(1);
    pub const Q4_0: Self = Self(2);
    pub const Q4_1: Self = Self(3);
    pub const Q5_0: Self = Self(6);
    pub const Q5_1: Self = Self(7);
    pub const Q8_0: Self = Self(8);
    pub const Q2_K: Self = Self(10);
    pub const Q3_K: Self = Self(11);
    pub const Q4_K: Self = Self(12);
    pub const Q5_K: Self = Self(13);
    pub const Q6_K: Self = Self(14);
    pub const IQ4_NL: Self = Self(20);
    pub const IQ4_XS: Self = Self(23);
    pub const BF16: Self = Self(30);
    pub const MXFP4: Self = Self(39);

    fn layout(self) -> Option<Layout> {
        let (name, block_values, block_bytes) = match self.0 {
            0 => ("F32", 1, 4),
            1 => ("F16", 1, 2),
            2 => ("Q4_0", 32, 18),
            3 => ("Q4_1", 32, 20),
            6 => ("Q5_0", 32, 22),
            7 => ("Q5_1", 32, 24),
            8 => ("Q8_0", 32, 34),
            9 => ("Q8_1", 32, 36),
            10 => ("Q2_K", 256, 84),
            11 => ("Q3_K", 256, 110),
            12 => ("Q4_K", 256, 144),
            13 => ("Q5_K", 256, 176),
            14 => ("Q6_K", 256, 210),
            15 => ("Q8_K", 256, 292),
            16 => ("IQ2_XXS", 256, 66),
            17 => ("IQ2_XS", 256, 74),
            18 => ("IQ3_XXS", 256, 98),
            19 => ("IQ1_S", 256, 50),
            20 => ("IQ4_NL", 32, 18),
            21 => ("IQ3_S", 256, 110),
            22 => ("IQ2_S", 256, 82),
            23 => ("IQ4_XS", 256, 136),
            24 => ("I8", 1, 1),
            25 => ("I16", 1, 2),
            26 => ("I32", 1, 4),
            27 => ("I64", 1, 8),
            28 => ("F64", 1, 8),
            29 => ("IQ1_M", 256, 56),
            30 => ("BF16", 1, 2),
            34 => ("TQ1_0", 256, 54),
            35 => ("TQ2_0", 256, 66),
            39 => ("MXFP4", 32, 17),
            _ => return None,
        };
        Some(Layout {
            name,
            block_values,
            block_bytes,
        })
    }

    /// Bytes of a tensor of `values` values; `None` for an unknown type or a count that is not a
    /// whole number of blocks.
    pub fn bytes_for(self, values: u64) -> Option<u64> {
        let layout = self.layout()?;
        if !values.is_multiple_of(layout.block_values) {
            return None;
        }
        (values / layout.block_values).checked_mul(layout.block_bytes)
    }

    /// Values per block (1 for plain types).
    pub fn block_values(self) -> Option<u64> {
        self.layout().map(|layout| layout.block_values)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.layout() {
            Some(layout) => f.write_str(layout.name),
            None => write!(f, "type {}", self.0),
        }
    }
}
