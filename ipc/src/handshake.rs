//! The first exchange on a new connection: the worker proves it is the process the supervisor
//! spawned, and both sides agree on the protocol version, before any other frame is trusted.
//!
//! The worker sends `Hello { protocol_version, pid, token }`; the supervisor checks the version,
//! the one-time token it passed at spawn, and the pid (the kernel's peer credentials, not just
//! what `Hello` claims), then answers `Welcome` or `Refused { message }`. A refusal carries the
//! reason so it shows up in the worker's log as well as the supervisor's.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::codec::{CodecError, encode_frame};
use crate::connection::{SupervisorConnection, WorkerConnection};
use crate::message::{FromWorker, PROTOCOL_VERSION, ToWorker};

/// The environment variable that carries the one-time token from supervisor to worker (kept out
/// of argv, where `ps` would show it).
pub const WORKER_TOKEN_ENV: &str = "CORRAL_WORKER_TOKEN";

/// How long the worker waits for the supervisor's answer to `Hello`, and a sensible default for
/// how long the supervisor waits for `Hello`. A worker sends `Hello` before loading its model,
/// so this bounds a stuck or impostor peer, not a slow load.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("handshake timed out: no {waiting_for} within {:.1} s", .after.as_secs_f64())]
    Timeout {
        waiting_for: &'static str,
        after: Duration,
    },
    #[error("peer closed the connection during the handshake")]
    Closed,
    #[error("handshake frame: {0}")]
    Codec(CodecError),
    #[error("protocol version mismatch: worker speaks {worker}, supervisor speaks {supervisor}")]
    VersionMismatch { worker: u32, supervisor: u32 },
    #[error("worker presented a wrong token")]
    BadToken,
    #[error("pid mismatch: expected worker pid {expected}, socket peer is pid {got}")]
    PidMismatch { expected: u32, got: u32 },
    #[error("Hello claims pid {claimed} but the socket peer is pid {peer}")]
    PidClaimMismatch { claimed: u32, peer: u32 },
    #[error("cannot read the socket peer's credentials: {0}")]
    PeerCredentials(std::io::Error),
    #[error("the socket peer's pid is unknown, so expected pid {expected} cannot be checked")]
    PeerPidUnknown { expected: u32 },
    #[error("expected {expected} during the handshake, got {got}")]
    Unexpected {
        expected: &'static str,
        got: &'static str,
    },
    #[error("supervisor refused the connection: {message}")]
    Refused { message: String },
}

/// By hand rather than `#[from]`, which would also make the codec error this one's `source`:
/// like `CodecError`, these errors put their cause in the message, so a `%err` log line is
/// complete and an error chain does not print it twice.
impl From<CodecError> for HandshakeError {
    fn from(err: CodecError) -> Self {
        HandshakeError::Codec(err)
    }
}

/// The worker's side: sends `Hello` with this process's pid and `token`, and returns the
/// connection once the supervisor answers `Welcome`.
pub async fn worker_handshake(
    stream: UnixStream,
    token: &str,
) -> Result<WorkerConnection, HandshakeError> {
    let mut conn = WorkerConnection::new(stream);
    let hello = FromWorker::Hello {
        protocol_version: PROTOCOL_VERSION,
        pid: std::process::id(),
        token: token.to_owned(),
    };
    let answer = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        conn.send(&hello).await?;
        conn.recv().await
    })
    .await
    .map_err(|_| HandshakeError::Timeout {
        waiting_for: "Welcome",
        after: HANDSHAKE_TIMEOUT,
    })??;
    match answer {
        Some(ToWorker::Welcome) => Ok(conn),
        Some(ToWorker::Refused { message }) => Err(HandshakeError::Refused { message }),
        Some(other) => Err(HandshakeError::Unexpected {
            expected: "Welcome or Refused",
            got: other.name(),
        }),
        None => Err(HandshakeError::Closed),
    }
}

/// The supervisor's side: waits up to `timeout` for `Hello`, checks it against the token passed
/// to the worker and, when known, the pid it was spawned as, and answers `Welcome` or `Refused`.
/// `expected_pid` is `None` only where the spawned process is not the worker itself (a wrapper).
pub async fn supervisor_accept(
    stream: UnixStream,
    expected_token: &str,
    expected_pid: Option<u32>,
    timeout: Duration,
) -> Result<SupervisorConnection, HandshakeError> {
    let credentials = stream
        .peer_cred()
        .map_err(HandshakeError::PeerCredentials)?;
    let peer_pid = credentials.pid().and_then(|pid| u32::try_from(pid).ok());
    // Another process that found the socket is refused before anything it sent is read, so
    // neither garbage nor silence from it can hold up the real worker's connection.
    if let (Some(expected), Some(got)) = (expected_pid, peer_pid)
        && expected != got
    {
        let refusal = HandshakeError::PidMismatch { expected, got };
        refuse_stranger(stream, refusal.to_string()).await;
        return Err(refusal);
    }
    let mut conn = SupervisorConnection::new(stream);
    let hello = tokio::time::timeout(timeout, conn.recv())
        .await
        .map_err(|_| HandshakeError::Timeout {
            waiting_for: "Hello",
            after: timeout,
        })??
        .ok_or(HandshakeError::Closed)?;
    match check_hello(&hello, expected_token, expected_pid, peer_pid) {
        Ok(()) => {
            conn.send(&ToWorker::Welcome).await?;
            Ok(conn)
        }
        Err(refusal) => {
            let message = refusal.to_string();
            // Best effort: the peer is being dropped either way, and the refusal we return
            // matters more than whether it could still read the reason.
            let _ = conn.send(&ToWorker::Refused { message }).await;
            Err(refusal)
        }
    }
}

/// How long a refused stranger's bytes are drained before the socket closes, and how many.
const STRANGER_LINGER: Duration = Duration::from_millis(100);
const STRANGER_DISCARD_LIMIT: usize = 1 << 20;

/// Answers with `Refused`, then discards what the peer sent for a moment before closing:
/// closing a Unix socket with unread bytes resets it, and the peer would lose the answer.
async fn refuse_stranger(mut stream: UnixStream, message: String) {
    let Ok(frame) = encode_frame(&ToWorker::Refused { message }) else {
        return;
    };
    if stream.write_all(&frame).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    let _ = tokio::time::timeout(STRANGER_LINGER, async {
        let mut sink = [0u8; 4096];
        let mut discarded = 0;
        while discarded < STRANGER_DISCARD_LIMIT {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(read) => discarded += read,
            }
        }
    })
    .await;
}

/// Version first, so a worker from another build learns that and not a confusing token error.
fn check_hello(
    hello: &FromWorker,
    expected_token: &str,
    expected_pid: Option<u32>,
    peer_pid: Option<u32>,
) -> Result<(), HandshakeError> {
    let FromWorker::Hello {
        protocol_version,
        pid,
        token,
    } = hello
    else {
        return Err(HandshakeError::Unexpected {
            expected: "Hello",
            got: hello.name(),
        });
    };
    if *protocol_version != PROTOCOL_VERSION {
        return Err(HandshakeError::VersionMismatch {
            worker: *protocol_version,
            supervisor: PROTOCOL_VERSION,
        });
    }
    if !tokens_match(token.as_bytes(), expected_token.as_bytes()) {
        return Err(HandshakeError::BadToken);
    }
    if let Some(peer) = peer_pid
        && peer != *pid
    {
        return Err(HandshakeError::PidClaimMismatch {
            claimed: *pid,
            peer,
        });
    }
    match (expected_pid, peer_pid) {
        (Some(expected), Some(got)) if expected != got => {
            Err(HandshakeError::PidMismatch { expected, got })
        }
        (Some(expected), None) => Err(HandshakeError::PeerPidUnknown { expected }),
        _ => Ok(()),
    }
}

/// Compares without stopping at the first differing byte, so response timing does not tell a
/// local attacker how much of a guessed token was right. Length is not secret. The supervisor's
/// API-key check uses it too.
pub fn tokens_match(given: &[u8], expected: &[u8]) -> bool {
    let diff = given
        .iter()
        .zip(expected)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    given.len() == expected.len() && std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::tokens_match;

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(tokens_match(b"s3cret", b"s3cret"));
        assert!(!tokens_match(b"s3cret", b"s3creT"));
        assert!(!tokens_match(b"s3cre", b"s3cret"));
        assert!(!tokens_match(b"", b"s3cret"));
        assert!(tokens_match(b"", b""));
    }
}
