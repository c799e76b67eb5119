//! MLX's affine format as the exact block types are rewritten into it: per group of 32 values,
//! unsigned `bits`-bit integers `q` with a scale and a bias, value = scale * q + bias.
//!
//! MLX packs a row's integers as one little-endian bit stream (value `i` at bits
//! `i * bits ..`), in `uint32` words; a group of 32 values fills exactly `bits` words, so groups
//! pack independently of each other.

pub const GROUP: usize = 32;

/// A tensor's groups in row order, as decoded from its blocks.
pub struct Groups {
    pub bits: u32,
    pub q: Vec<u8>,
    pub scales: Vec<f32>,
    pub biases: Vec<f32>,
}

impl Groups {
    pub fn with_capacity(bits: u32, values: usize) -> Self {
        Self {
            bits,
            q: Vec::with_capacity(values),
            scales: Vec::with_capacity(values / GROUP),
            biases: Vec::with_capacity(values / GROUP),
        }
    }

    /// Appends one group of 32 integers.
    pub fn push(&mut self, q: &[u8; GROUP], scale: f32, bias: f32) {
        self.q.extend_from_slice(q);
        self.scales.push(scale);
        self.biases.push(bias);
    }

    /// Whether every scale and bias is an f16 value, kept exactly by an f16 array.
    pub fn fit_f16(&self) -> bool {
        self.scales
            .iter()
            .chain(&self.biases)
            .all(|&value| half::f16::from_f32(value).to_f32() == value)
    }

    /// The integers as MLX's packed `uint32` words.
    pub fn packed(&self) -> Vec<u32> {
        let bits = self.bits as usize;
        let mut words = vec![0u32; self.q.len() * bits / 32];
        for (group, (q, out)) in self
            .q
            .chunks_exact(GROUP)
            .zip(words.chunks_exact_mut(bits))
            .enumerate()
        {
            debug_assert!(group < self.scales.len());
            for (i, &value) in q.iter().enumerate() {
                let offset = i * bits;
                let (word, shift) = (offset / 32, offset % 32);
                out[word] |= u32::from(value) << shift;
                if shift + bits > 32 {
                    out[word + 1] |= u32::from(value) >> (32 - shift);
                }
            }
        }
        words
    }

    /// The values MLX computes from these groups (`scale * q + bias` in f32).
    #[cfg(test)]
    pub fn dequantized(&self) -> Vec<f32> {
        self.q
            .chunks_exact(GROUP)
            .zip(self.scales.iter().zip(&self.biases))
            .flat_map(|(q, (&scale, &bias))| q.iter().map(move |&q| scale * f32::from(q) + bias))
            .collect()
    }
}

/// An f16 stored little-endian at `bytes[at..at + 2]`, widened exactly.
pub fn f16_at(bytes: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32()
}

/// The 32 nibbles of 16 bytes in ggml's order: the low nibbles are values 0..16, the high ones
/// 16..32.
pub fn nibbles(bytes: &[u8]) -> [u8; GROUP] {
    let mut q = [0u8; GROUP];
    for (j, &byte) in bytes[..GROUP / 2].iter().enumerate() {
        q[j] = byte & 0x0f;
        q[j + GROUP / 2] = byte >> 4;
    }
    q
}
