//! Framing, as pure functions over byte slices: a 4-byte big-endian body length, then a
//! MessagePack body encoded with field names.
//!
//! Decoding is incremental (`Ok(None)` means "need more bytes") and takes no I/O, so the async
//! reader in `framed.rs` is a thin loop around it and every edge case (short header, oversize
//! header, truncated body, undecodable body) can be tested, and fuzzed, without a socket.
//!
//! The peer is another process that may be buggy, so nothing it sends may panic or make us
//! allocate without bound: the length header is checked against [`MAX_FRAME_BYTES`] before the
//! body is awaited, and bodies are decoded from a bounded slice, so a length claimed inside the
//! MessagePack body fails as end-of-input instead of being allocated.

use std::io::Cursor;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The largest body either side sends or accepts: above the supervisor's largest request body
/// (32 MiB), since a chat's images travel as bytes in one `Generate` frame, yet a bound on what a
/// corrupt or hostile length header can make us buffer.
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// The length prefix: a `u32`, big-endian.
pub const HEADER_BYTES: usize = 4;

/// A framing failure. After any of these the byte stream can no longer be trusted to be in step:
/// the connection should be closed with a logged error, not read further.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("frame header announces {len} bytes, over the {max}-byte limit")]
    FrameTooLarge { len: usize, max: usize },
    #[error("connection closed mid-frame: {got} of {expected} bytes received")]
    Truncated { got: usize, expected: usize },
    #[error("frame body of {len} bytes does not decode: {reason}")]
    Decode {
        len: usize,
        reason: rmp_serde::decode::Error,
    },
    #[error("frame body of {len} bytes decodes but {extra} bytes are left over")]
    TrailingBytes { len: usize, extra: usize },
    #[error("message does not encode: {0}")]
    Encode(rmp_serde::encode::Error),
    #[error("socket I/O failed: {0}")]
    Io(std::io::Error),
}

/// Encodes `msg` as one complete frame, header included, ready for a single `write_all`.
pub fn encode_frame<T: Serialize + ?Sized>(msg: &T) -> Result<Vec<u8>, CodecError> {
    let mut frame = vec![0; HEADER_BYTES];
    rmp_serde::encode::write_named(&mut frame, msg).map_err(CodecError::Encode)?;
    let len = frame.len() - HEADER_BYTES;
    let header = u32::try_from(len)
        .ok()
        .filter(|_| len <= MAX_FRAME_BYTES)
        .ok_or(CodecError::FrameTooLarge {
            len,
            max: MAX_FRAME_BYTES,
        })?;
    frame[..HEADER_BYTES].copy_from_slice(&header.to_be_bytes());
    Ok(frame)
}

/// Decodes the frame at the start of `buf`: `Ok(None)` until the whole frame is there, then the
/// message and how many bytes of `buf` it used. An oversize header is an error as soon as its
/// four bytes are in, before any body is awaited.
pub fn decode_frame<T: DeserializeOwned>(buf: &[u8]) -> Result<Option<(T, usize)>, CodecError> {
    let Some(len) = body_len(buf)? else {
        return Ok(None);
    };
    let end = HEADER_BYTES + len;
    let Some(body) = buf.get(HEADER_BYTES..end) else {
        return Ok(None);
    };
    decode_body(body).map(|msg| Some((msg, end)))
}

/// The body length announced by the header at the start of `buf`, checked against the limit;
/// `None` while fewer than four bytes are in.
pub(crate) fn body_len(buf: &[u8]) -> Result<Option<usize>, CodecError> {
    let Some(header) = buf.first_chunk::<HEADER_BYTES>() else {
        return Ok(None);
    };
    // A u32 always fits in usize on the 32- and 64-bit targets corral runs on; saturating keeps
    // the comparison below meaningful anywhere else.
    let len = usize::try_from(u32::from_be_bytes(*header)).unwrap_or(usize::MAX);
    if len > MAX_FRAME_BYTES {
        return Err(CodecError::FrameTooLarge {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    Ok(Some(len))
}

/// Decodes one body, which must be exactly one MessagePack value: trailing bytes mean the
/// sender's framing and ours disagree, and silently ignoring them would hide that.
fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
    // A reader over a cursor, not `from_slice`, because only it reports how far decoding got.
    // Its string reads are bounded by the bytes actually left, so a huge length inside the body
    // fails as end-of-input instead of allocating.
    let mut de = rmp_serde::Deserializer::new(Cursor::new(body));
    let msg = T::deserialize(&mut de).map_err(|reason| CodecError::Decode {
        len: body.len(),
        reason,
    })?;
    let used = usize::try_from(de.position()).unwrap_or(usize::MAX);
    if used != body.len() {
        return Err(CodecError::TrailingBytes {
            len: body.len(),
            extra: body.len().saturating_sub(used),
        });
    }
    Ok(msg)
}
