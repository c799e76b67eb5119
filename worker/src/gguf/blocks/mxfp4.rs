//! `MXFP4`: 32 e2m1 codes with one e8m0 exponent, the same numbers as MLX's `mxfp4` mode. ggml
//! stores its codes as a table of doubled values times half the exponent's power of two, which
//! multiplies out to MLX's code times the whole power: the exponent byte and the codes carry over
//! as they are, only the nibbles' order changes (ggml puts values 16..32 in the high nibbles).

use super::groups::{GROUP, Groups, nibbles};

pub const BLOCK_BYTES: usize = 17;

/// The codes packed as MLX packs 4-bit values, and one exponent per 32.
pub fn repack(bytes: &[u8]) -> (Vec<u32>, Vec<u8>) {
    let blocks = bytes.len() / BLOCK_BYTES;
    let mut codes = Groups::with_capacity(4, blocks * GROUP);
    let mut exponents = Vec::with_capacity(blocks);
    for block in bytes.chunks_exact(BLOCK_BYTES) {
        exponents.push(block[0]);
        codes.push(&nibbles(&block[1..]), 0.0, 0.0);
    }
    (codes.packed(), exponents)
}

/// ggml's dequantization: the doubled e2m1 value times `2^(e - 128)`.
#[cfg(test)]
pub fn dequantize(bytes: &[u8]) -> Vec<f32> {
    const DOUBLED: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
    let mut out = Vec::with_capacity(bytes.len() / BLOCK_BYTES * GROUP);
    for block in bytes.chunks_exact(BLOCK_BYTES) {
        let half_scale = e8m0_half(block[0]);
        out.extend(
            nibbles(&block[1..])
                .iter()
                .map(|&code| half_scale * f32::from(DOUBLED[usize::from(code)])),
        );
    }
    out
}

/// `2^(e - 128)` as an f32, subnormal for the two smallest exponents.
#[cfg(test)]
fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}
