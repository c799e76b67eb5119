//! An in-memory reader that hands out its bytes in fixed pieces, to prove frames reassemble
//! across any split the socket might produce.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

pub struct Chunked(VecDeque<Vec<u8>>);

impl Chunked {
    /// Splits `bytes` at the given cut sizes (each at least one byte); the rest is the last piece.
    pub fn new(bytes: &[u8], cuts: &[usize]) -> Self {
        let mut pieces = VecDeque::new();
        let mut rest = bytes;
        for &cut in cuts {
            if rest.is_empty() {
                break;
            }
            let (piece, tail) = rest.split_at(cut.clamp(1, rest.len()));
            pieces.push_back(piece.to_vec());
            rest = tail;
        }
        if !rest.is_empty() {
            pieces.push_back(rest.to_vec());
        }
        Self(pieces)
    }
}

impl AsyncRead for Chunked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(mut piece) = self.0.pop_front() {
            let n = piece.len().min(buf.remaining());
            buf.put_slice(&piece[..n]);
            if n < piece.len() {
                self.0.push_front(piece.split_off(n));
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// Runs a future that never waits on real I/O or timers.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime builds")
        .block_on(future)
}
