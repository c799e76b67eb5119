//! One supervisor–worker connection: a Unix stream socket split into a typed frame reader and a
//! typed frame writer.
//!
//! It is split from the start, not wrapped whole, because each side runs one reader task and one
//! writer task ("each side has one writer task"): [`Connection::into_split`] hands the halves to
//! them. `send`/`recv` on the whole connection serve the handshake and simple sequential code.
//!
//! This is tokio's own `UnixStream` rather than the `interprocess` crate: corral runs only on
//! Unix (macOS and Linux), so interprocess's portable local-socket layer would add a dependency
//! and a wrapper type for nothing, while tokio's stream already gives `peer_cred()` (the pid
//! check) and `UnixStream::pair()` (tests).

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::codec::CodecError;
use crate::framed::{FrameReader, FrameWriter};
use crate::message::{FromWorker, ToWorker};

/// A connection that receives `In` and sends `Out`.
#[derive(Debug)]
pub struct Connection<In, Out> {
    reader: FrameReader<OwnedReadHalf, In>,
    writer: FrameWriter<OwnedWriteHalf, Out>,
}

/// The supervisor's end of a worker connection.
pub type SupervisorConnection = Connection<FromWorker, ToWorker>;

/// The worker's end of its supervisor connection.
pub type WorkerConnection = Connection<ToWorker, FromWorker>;

impl<In: DeserializeOwned, Out: Serialize> Connection<In, Out> {
    /// Wraps a connected stream. No handshake happens here; see `handshake.rs`.
    pub fn new(stream: UnixStream) -> Self {
        let (read, write) = stream.into_split();
        Self {
            reader: FrameReader::new(read),
            writer: FrameWriter::new(write),
        }
    }

    pub async fn send(&mut self, msg: &Out) -> Result<(), CodecError> {
        self.writer.write_frame(msg).await
    }

    /// The next message, or `Ok(None)` once the peer has closed the connection cleanly.
    /// Cancel-safe.
    pub async fn recv(&mut self) -> Result<Option<In>, CodecError> {
        self.reader.read_frame().await
    }

    /// The halves, for one reader task and one writer task. Dropping the writer half shuts down
    /// the write direction, which the peer reads as a clean end of stream.
    pub fn into_split(
        self,
    ) -> (
        FrameReader<OwnedReadHalf, In>,
        FrameWriter<OwnedWriteHalf, Out>,
    ) {
        (self.reader, self.writer)
    }
}
