//! ggml's first block types: 32 values per block with one f16 scale (and an f16 minimum for the
//! `_1` kinds). Each block is one MLX group as it is: `Q4_0` is `d * (q - 8)`, so scale `d` and
//! bias `-8d`; `Q8_0`'s signed bytes become `q + 128` with bias `-128d`. Every bias is an f16
//! times a power of two, exact in f32.

use super::groups::{GROUP, Groups, f16_at, nibbles};
use crate::gguf::ggml_type::GgmlType;

/// Appends the group of one block of `ggml_type` (a legacy type).
pub fn push_block(ggml_type: GgmlType, block: &[u8], groups: &mut Groups) {
    let d = f16_at(block, 0);
    match ggml_type {
        GgmlType::Q4_0 => groups.push(&nibbles(&block[2..]), d, -8.0 * d),
        GgmlType::Q4_1 => groups.push(&nibbles(&block[4..]), d, f16_at(block, 2)),
        GgmlType::Q5_0 => groups.push(&five_bits(&block[2..]), d, -16.0 * d),
        GgmlType::Q5_1 => groups.push(&five_bits(&block[4..]), d, f16_at(block, 2)),
        GgmlType::Q8_0 => {
            let mut q = [0u8; GROUP];
            for (q, &byte) in q.iter_mut().zip(&block[2..2 + GROUP]) {
                // Two's complement to offset binary: -128..127 becomes 0..255.
                *q = byte ^ 0x80;
            }
            groups.push(&q, d, -128.0 * d);
        }
        other => unreachable!("{other} is not a legacy block type"),
    }
}

/// Bits per value of a legacy type in MLX.
pub fn bits(ggml_type: GgmlType) -> Option<u32> {
    match ggml_type {
        GgmlType::Q4_0 | GgmlType::Q4_1 => Some(4),
        GgmlType::Q5_0 | GgmlType::Q5_1 => Some(5),
        GgmlType::Q8_0 => Some(8),
        _ => None,
    }
}

/// `Q5_0`/`Q5_1`'s values: a 32-bit word of fifth bits, then 16 bytes of nibbles.
fn five_bits(bytes: &[u8]) -> [u8; GROUP] {
    let high = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let mut q = nibbles(&bytes[4..]);
    for (j, q) in q.iter_mut().enumerate() {
        *q |= (((high >> j) & 1) as u8) << 4;
    }
    q
}
