//! A worker's output, forwarded line by line to our log; the last error it wrote is kept, so
//! that a worker that ends before it is ready (or a rank another host runs) can say why.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::oneshot;

/// How `corral-worker` leads the error it ends with.
const ERROR_PREFIX: &str = "corral-worker: error: ";

/// How long the stream may stay open after its process has ended (a child holding it).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The error a worker ended with, once its stream has closed.
pub struct LastError(oneshot::Receiver<Option<String>>);

impl LastError {
    /// The error, when the worker wrote one; call once the process has ended.
    pub async fn get(self) -> Option<String> {
        tokio::time::timeout(CLOSE_TIMEOUT, self.0)
            .await
            .ok()?
            .ok()?
    }
}

/// Forwards `stream` to the log as `model`'s worker `pid` writes it, from a task of its own.
pub fn forward(
    stream: Option<impl AsyncRead + Unpin + Send + 'static>,
    model: &str,
    pid: u32,
) -> LastError {
    let (said, last_error) = oneshot::channel();
    let Some(stream) = stream else {
        return LastError(last_error);
    };
    let model = model.to_owned();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream);
        let mut line = Vec::new();
        let mut error = None;
        // Bytes, not `lines()`: a stray non-UTF-8 byte must not end the forwarding.
        while matches!(lines.read_until(b'\n', &mut line).await, Ok(read) if read > 0) {
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end();
            tracing::info!(target: "worker", model, pid, "{text}");
            if let Some(message) = text.strip_prefix(ERROR_PREFIX) {
                error = Some(message.to_owned());
            }
            line.clear();
        }
        let _ = said.send(error);
    });
    LastError(last_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_last_error_line_is_kept_once_the_stream_closes() {
        let output = b"loading\ncorral-worker: error: joining the worker group: no jaccl\n";
        assert_eq!(
            forward(Some(&output[..]), "m", 1).get().await.as_deref(),
            Some("joining the worker group: no jaccl")
        );
        assert_eq!(forward(Some(&b"fine\n"[..]), "m", 1).get().await, None);
    }
}
