//! The fixed header in front of every block file. It says which model, which block and which
//! shape the payload belongs to and carries the payload's sha256, so a file from another model,
//! another cache layout or a torn write is recognised before a single byte of it is served.
//!
//! Layout, little-endian, `HEADER_LEN` bytes: magic `CKVB`, format version (u32), model
//! fingerprint (32), block key (32), layers, kv heads, block tokens, head dim (u32 each), dtype
//! tag (u8) and three zero bytes, payload length (u64), payload sha256 (32).

use sha2::{Digest, Sha256};

/// The sha256 chain key of a block, computed by the caller.
pub type BlockKey = [u8; 32];
/// The identity of a model's weights, computed by the caller.
pub type Fingerprint = [u8; 32];

pub const MAGIC: [u8; 4] = *b"CKVB";
/// Bumped whenever the layout or the payload encoding changes; older files are then deleted.
pub const FORMAT_VERSION: u32 = 2;
pub const HEADER_LEN: usize = 132;

/// What one block holds, as the caller lays it out; a file whose shape differs is not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockShape {
    pub layers: u32,
    pub kv_heads: u32,
    pub block_tokens: u32,
    pub head_dim: u32,
    /// The caller's tag for the element type.
    pub dtype: u8,
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

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.fingerprint);
        out.extend_from_slice(&self.key);
        for field in [
            self.shape.layers,
            self.shape.kv_heads,
            self.shape.block_tokens,
            self.shape.head_dim,
        ] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        out.extend_from_slice(&[self.shape.dtype, 0, 0, 0]);
        out.extend_from_slice(&self.payload_len.to_le_bytes());
        out.extend_from_slice(&self.checksum);
        debug_assert_eq!(out.len(), HEADER_LEN);
        out
    }

    /// Decodes the first `HEADER_LEN` bytes of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Self, HeaderFault> {
        let Some(bytes) = bytes.get(..HEADER_LEN) else {
            return Err(HeaderFault::Short(bytes.len()));
        };
        let mut fields = Fields(bytes);
        if fields.take::<4>() != MAGIC {
            return Err(HeaderFault::Magic);
        }
        let version = u32::from_le_bytes(fields.take());
        if version != FORMAT_VERSION {
            return Err(HeaderFault::Version(version));
        }
        let fingerprint = fields.take();
        let key = fields.take();
        let mut shape = BlockShape {
            layers: u32::from_le_bytes(fields.take()),
            kv_heads: u32::from_le_bytes(fields.take()),
            block_tokens: u32::from_le_bytes(fields.take()),
            head_dim: u32::from_le_bytes(fields.take()),
            dtype: 0,
        };
        let [dtype, padding @ ..] = fields.take::<4>();
        if padding != [0; 3] {
            return Err(HeaderFault::Padding);
        }
        shape.dtype = dtype;
        Ok(Self {
            version,
            fingerprint,
            key,
            shape,
            payload_len: u64::from_le_bytes(fields.take()),
            checksum: fields.take(),
        })
    }
}

/// Reads fixed-size fields front to back from a slice already checked to be `HEADER_LEN` long.
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
            layers: 2,
            kv_heads: 3,
            block_tokens: 4,
            head_dim: 5,
            dtype: 6,
        };
        BlockHeader::new([1; 32], [2; 32], shape, b"payload")
    }

    #[test]
    fn encode_then_decode_round_trips() {
        let bytes = header().encode();
        assert_eq!(bytes.len(), HEADER_LEN);
        assert_eq!(BlockHeader::decode(&bytes), Ok(header()));
        assert_eq!(header().payload_len, 7);
        assert_eq!(header().checksum, checksum(b"payload"));
    }

    #[test]
    fn decode_rejects_short_input() {
        let bytes = header().encode();
        assert_eq!(
            BlockHeader::decode(&bytes[..HEADER_LEN - 1]),
            Err(HeaderFault::Short(HEADER_LEN - 1))
        );
    }

    #[test]
    fn decode_rejects_bad_magic_version_and_padding() {
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
        bytes[4 + 4 + 32 + 32 + 16 + 1] = 1;
        assert_eq!(BlockHeader::decode(&bytes), Err(HeaderFault::Padding));
    }
}
