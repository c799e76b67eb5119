//! The header in front of every block file. It says which model, which block and which shape
//! the payload belongs to and carries the payload's sha256, so a file from another model,
//! another cache layout or a torn write is recognised before a single byte of it is served.
//!
//! Layout, little-endian: magic `CKVB`, format version (u32), model fingerprint (32), block key
//! (32), block tokens (u32), dtype tag (u8) and three zero bytes, payload length (u64), payload
//! sha256 (32), recurrent layer count (u32), key/value layer count (u32) — [`FIXED_LEN`] bytes —
//! then each key/value layer's kv heads, key dim and value dim (u32 each).

use sha2::{Digest, Sha256};

/// The sha256 chain key of a block, computed by the caller.
pub type BlockKey = [u8; 32];
/// The identity of a model's weights, computed by the caller.
pub type Fingerprint = [u8; 32];

pub const MAGIC: [u8; 4] = *b"CKVB";
/// Bumped whenever the layout or the payload encoding changes; older files are then deleted.
/// 5: recurrent layers' boundary snapshots after the keys and values, and each key/value
/// layer's key and value widths.
pub const FORMAT_VERSION: u32 = 5;
/// The header's bytes before its per-layer table.
pub const FIXED_LEN: usize = 128;
/// Bytes of each layer's entry in the table after the fixed part.
const LAYER_LEN: usize = 12;
/// More layers than any model has: a count beyond it is a corrupt header, not a table to read.
const MAX_LAYERS: u32 = 1 << 12;

/// What one block holds, as the caller lays it out; a file whose shape differs is not served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockShape {
    pub block_tokens: u32,
    /// The caller's tag for the element type.
    pub dtype: u8,
    /// Recurrent caches, whose states a block's snapshot holds (in the model's cache order).
    pub recurrent_layers: u32,
    /// Each key/value cache's keys (and values) per position, in the model's cache order. Layers differ
    /// (Gemma 4's full-attention layers have wider heads); a layer that reads another's keys and
    /// values holds no cache, so it has no entry.
    pub layers: Vec<LayerShape>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    pub kv_heads: u32,
    /// Keys per head and position; a latent attention layer's values (its shared rotary key)
    /// are narrower than its keys (the latent).
    pub key_dim: u32,
    pub value_dim: u32,
}

impl BlockShape {
    /// Elements of one layer's keys and of its values in a block.
    pub fn elements(&self, layer: LayerShape) -> (usize, usize) {
        let per_dim = (layer.kv_heads * self.block_tokens) as usize;
        (
            per_dim * layer.key_dim as usize,
            per_dim * layer.value_dim as usize,
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockHeader {
    pub version: u32,
    pub fingerprint: Fingerprint,
    pub key: BlockKey,
    pub shape: BlockShape,
    pub payload_len: u64,
    pub checksum: [u8; 32],
}

/// Why header bytes do not decode; the file is then deleted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderFault {
    #[error("{0} bytes, shorter than a header")]
    Short(usize),
    #[error("not a block file (bad magic)")]
    Magic,
    #[error("format version {0}, this worker writes {FORMAT_VERSION}")]
    Version(u32),
    #[error("nonzero padding")]
    Padding,
    #[error("{0} layers")]
    Layers(u32),
}

pub fn checksum(payload: &[u8]) -> [u8; 32] {
    Sha256::digest(payload).into()
}

impl BlockHeader {
    /// The header for `payload`, hashing it.
    pub fn new(fingerprint: Fingerprint, key: BlockKey, shape: BlockShape, payload: &[u8]) -> Self {
        Self {
            version: FORMAT_VERSION,
            fingerprint,
            key,
            shape,
            payload_len: payload.len() as u64,
            checksum: checksum(payload),
        }
    }

    /// Bytes of the encoded header.
    pub fn encoded_len(&self) -> usize {
        FIXED_LEN + LAYER_LEN * self.shape.layers.len()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.fingerprint);
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.shape.block_tokens.to_le_bytes());
        out.extend_from_slice(&[self.shape.dtype, 0, 0, 0]);
        out.extend_from_slice(&self.payload_len.to_le_bytes());
        out.extend_from_slice(&self.checksum);
        out.extend_from_slice(&self.shape.recurrent_layers.to_le_bytes());
        out.extend_from_slice(&(self.shape.layers.len() as u32).to_le_bytes());
        for layer in &self.shape.layers {
            out.extend_from_slice(&layer.kv_heads.to_le_bytes());
            out.extend_from_slice(&layer.key_dim.to_le_bytes());
            out.extend_from_slice(&layer.value_dim.to_le_bytes());
        }
        debug_assert_eq!(out.len(), self.encoded_len());
        out
    }

    /// The whole header's length, read from its first [`FIXED_LEN`] bytes, which must be a
    /// block file's: how much more to read before [`BlockHeader::decode`].
    pub fn len_from_fixed(fixed: &[u8]) -> Result<usize, HeaderFault> {
        let Some(fixed) = fixed.get(..FIXED_LEN) else {
            return Err(HeaderFault::Short(fixed.len()));
        };
        let mut fields = Fields(fixed);
        if fields.take::<4>() != MAGIC {
            return Err(HeaderFault::Magic);
        }
        let version = u32::from_le_bytes(fields.take());
        if version != FORMAT_VERSION {
            return Err(HeaderFault::Version(version));
        }
        let mut count = [0; 4];
        count.copy_from_slice(&fixed[FIXED_LEN - 4..]);
        let layers = u32::from_le_bytes(count);
        if layers > MAX_LAYERS {
            return Err(HeaderFault::Layers(layers));
        }
        Ok(FIXED_LEN + LAYER_LEN * layers as usize)
    }

    /// Decodes the header at the start of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Self, HeaderFault> {
        let len = Self::len_from_fixed(bytes)?;
        let Some(bytes) = bytes.get(..len) else {
            return Err(HeaderFault::Short(bytes.len()));
        };
        let mut fields = Fields(&bytes[8..]);
        let fingerprint = fields.take();
        let key = fields.take();
        let block_tokens = u32::from_le_bytes(fields.take());
        let [dtype, padding @ ..] = fields.take::<4>();
        if padding != [0; 3] {
            return Err(HeaderFault::Padding);
        }
        let payload_len = u64::from_le_bytes(fields.take());
        let checksum = fields.take();
        let recurrent_layers = u32::from_le_bytes(fields.take());
        if recurrent_layers > MAX_LAYERS {
            return Err(HeaderFault::Layers(recurrent_layers));
        }
        let layers = u32::from_le_bytes(fields.take());
        let layers = (0..layers)
            .map(|_| LayerShape {
                kv_heads: u32::from_le_bytes(fields.take()),
                key_dim: u32::from_le_bytes(fields.take()),
                value_dim: u32::from_le_bytes(fields.take()),
            })
            .collect();
        Ok(Self {
            version: FORMAT_VERSION,
            fingerprint,
            key,
            shape: BlockShape {
                block_tokens,
                dtype,
                recurrent_layers,
                layers,
            },
            payload_len,
            checksum,
        })
    }
}

/// Reads fixed-size fields front to back from a slice already checked to be long enough.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        let mut out = [0; N];
        out.copy_from_slice(head);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> BlockHeader {
        let shape = BlockShape {
            block_tokens: 4,
            dtype: 6,
            recurrent_layers: 3,
            layers: vec![
                LayerShape {
                    kv_heads: 3,
                    key_dim: 5,
                    value_dim: 5,
                },
                LayerShape {
                    kv_heads: 1,
                    key_dim: 10,
                    value_dim: 2,
                },
            ],
        };
        BlockHeader::new([1; 32], [2; 32], shape, b"payload")
    }

    #[test]
    fn encode_then_decode_round_trips() {
        let bytes = header().encode();
        assert_eq!(bytes.len(), FIXED_LEN + 2 * LAYER_LEN);
        assert_eq!(
            BlockHeader::len_from_fixed(&bytes[..FIXED_LEN]),
            Ok(bytes.len())
        );
        assert_eq!(BlockHeader::decode(&bytes), Ok(header()));
        assert_eq!(header().payload_len, 7);
        assert_eq!(header().checksum, checksum(b"payload"));
    }

    #[test]
    fn decode_rejects_short_input() {
        let bytes = header().encode();
        assert_eq!(
            BlockHeader::decode(&bytes[..FIXED_LEN - 1]),
            Err(HeaderFault::Short(FIXED_LEN - 1))
        );
        assert_eq!(
            BlockHeader::decode(&bytes[..bytes.len() - 1]),
            Err(HeaderFault::Short(bytes.len() - 1))
        );
    }

    #[test]
    fn decode_rejects_bad_magic_version_padding_and_layer_count() {
        let mut bytes = header().encode();
        bytes[0] = b'X';
        assert_eq!(BlockHeader::decode(&bytes), Err(HeaderFault::Magic));

        let mut bytes = header().encode();
        bytes[4..8].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        assert_eq!(
            BlockHeader::decode(&bytes),
            Err(HeaderFault::Version(FORMAT_VERSION + 1))
        );

        let mut bytes = header().encode();
        bytes[4 + 4 + 32 + 32 + 4 + 1] = 1;
        assert_eq!(BlockHeader::decode(&bytes), Err(HeaderFault::Padding));

        let mut bytes = header().encode();
        bytes[FIXED_LEN - 4..FIXED_LEN].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            BlockHeader::decode(&bytes),
            Err(HeaderFault::Layers(u32::MAX))
        );
    }
}
