//! Async frame reading and writing over any tokio byte stream.
//!
//! The reader keeps its own buffer and decodes with [`decode_frame`], instead of `read_exact`
//! calls, so that `read_frame` is cancel-safe: a `select!` that drops it mid-frame loses no
//! bytes, and the next call picks up where the last one stopped. Both halves are typed by the
//! message they carry, so a supervisor cannot write a `FromWorker` by mistake.

use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::codec::{CodecError, HEADER_BYTES, body_len, decode_frame, encode_frame};

/// How much to ask the socket for while no header says how much is coming.
const READ_CHUNK: usize = 8 * 1024;

/// Above this, an emptied buffer is given back, so one long prompt does not pin its frame-sized
/// allocation for the rest of the connection.
const KEEP_CAPACITY: usize = 1024 * 1024;

/// Reads frames of `T` from `inner`.
#[derive(Debug)]
pub struct FrameReader<R, T> {
    inner: R,
    buf: Vec<u8>,
    _msg: PhantomData<fn() -> T>,
}

impl<R: AsyncRead + Unpin, T: DeserializeOwned> FrameReader<R, T> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::with_capacity(READ_CHUNK),
            _msg: PhantomData,
        }
    }

    /// The next message; `Ok(None)` on a clean end of stream between frames, `Truncated` on an
    /// end of stream inside one. Cancel-safe. After an error the stream is out of step and the
    /// connection should be closed.
    pub async fn read_frame(&mut self) -> Result<Option<T>, CodecError> {
        loop {
            if let Some((msg, used)) = decode_frame(&self.buf)? {
                self.consume(used);
                return Ok(Some(msg));
            }
            let frame_len = body_len(&self.buf)?.map(|len| HEADER_BYTES + len);
            // Once the header is in, make room for the rest of the frame in one step (it is
            // already known to be under the limit); before that, read a modest chunk.
            let wanted = frame_len.map_or(READ_CHUNK, |len| len - self.buf.len());
            self.buf.reserve(wanted);
            let read = self
                .inner
                .read_buf(&mut self.buf)
                .await
                .map_err(CodecError::Io)?;
            if read == 0 {
                return match self.buf.len() {
                    0 => Ok(None),
                    got => Err(CodecError::Truncated {
                        got,
                        expected: frame_len.unwrap_or(HEADER_BYTES),
                    }),
                };
            }
        }
    }

    fn consume(&mut self, used: usize) {
        self.buf.drain(..used);
        if self.buf.is_empty() && self.buf.capacity() > KEEP_CAPACITY {
            self.buf = Vec::with_capacity(READ_CHUNK);
        }
    }
}

/// Writes frames of `T` to `inner`.
#[derive(Debug)]
pub struct FrameWriter<W, T> {
    inner: W,
    _msg: PhantomData<fn(&T)>,
}

impl<W: AsyncWrite + Unpin, T: Serialize> FrameWriter<W, T> {
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            _msg: PhantomData,
        }
    }

    /// Encodes and writes one frame, then flushes. Not cancel-safe (a frame dropped half-written
    /// desynchronises the stream), which is why each side has exactly one writer task.
    pub async fn write_frame(&mut self, msg: &T) -> Result<(), CodecError> {
        let frame = encode_frame(msg)?;
        self.inner.write_all(&frame).await.map_err(CodecError::Io)?;
        self.inner.flush().await.map_err(CodecError::Io)
    }
}
