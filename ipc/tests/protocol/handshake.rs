//! The handshake over real socket pairs: what each side sees when the worker is genuine, has the
//! wrong token or version, is another process, or is not speaking the protocol at all.

use std::time::Duration;

use corral_ipc::*;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

const TOKEN: &str = "one-time-token-0123456789";
/// Only the timeout test waits this little, on a peer that never speaks.
const SHORT: Duration = Duration::from_millis(200);
/// What the other tests give the supervisor's side: a hang guard, so a loaded machine cannot
/// turn them into timeouts.
const PATIENCE: Duration = Duration::from_secs(300);

fn me() -> u32 {
    std::process::id()
}

/// A worker end that speaks raw frames, to send what a real worker never would.
fn raw_worker(
    stream: UnixStream,
) -> (
    FrameReader<OwnedReadHalf, ToWorker>,
    FrameWriter<OwnedWriteHalf, FromWorker>,
) {
    Connection::<ToWorker, FromWorker>::new(stream).into_split()
}

fn hello(protocol_version: u32, pid: u32, token: &str) -> FromWorker {
    FromWorker::Hello {
        protocol_version,
        pid,
        token: token.into(),
    }
}

/// Sends one frame as a worker, then returns what the supervisor concluded and answered.
async fn accept_after(
    first: FromWorker,
    expected_pid: Option<u32>,
) -> (
    Result<SupervisorConnection, HandshakeError>,
    Option<ToWorker>,
) {
    let (sup, wrk) = UnixStream::pair().expect("socketpair");
    let (mut reader, mut writer) = raw_worker(wrk);
    writer.write_frame(&first).await.expect("send");
    let result = supervisor_accept(sup, TOKEN, expected_pid, PATIENCE).await;
    let answer = reader.read_frame().await.expect("answer decodes");
    (result, answer)
}

#[tokio::test]
async fn genuine_worker_is_welcomed_both_ways() {
    let (sup, wrk) = UnixStream::pair().expect("socketpair");
    let (accepted, joined) = tokio::join!(
        supervisor_accept(sup, TOKEN, Some(me()), PATIENCE),
        worker_handshake(wrk, TOKEN),
    );
    accepted.expect("supervisor accepts");
    joined.expect("worker is welcomed");
}

#[tokio::test]
async fn wrong_token_is_refused_and_the_worker_learns_why() {
    let (sup, wrk) = UnixStream::pair().expect("socketpair");
    let (accepted, joined) = tokio::join!(
        supervisor_accept(sup, TOKEN, Some(me()), PATIENCE),
        worker_handshake(wrk, "guessed"),
    );
    assert!(matches!(accepted, Err(HandshakeError::BadToken)));
    let Err(HandshakeError::Refused { message }) = joined else {
        panic!("worker should be refused, got {joined:?}");
    };
    assert!(message.contains("token"), "{message}");
    assert!(
        !message.contains(TOKEN),
        "the refusal must not echo the token"
    );
}

#[tokio::test]
async fn version_mismatch_names_both_versions() {
    let newer = PROTOCOL_VERSION + 1;
    let (result, answer) = accept_after(hello(newer, me(), TOKEN), None).await;
    let err = result.expect_err("refused");
    assert!(
        matches!(err, HandshakeError::VersionMismatch { worker, supervisor }
        if worker == newer && supervisor == PROTOCOL_VERSION)
    );
    let Some(ToWorker::Refused { message }) = answer else {
        panic!("expected Refused, got {answer:?}");
    };
    assert!(message.contains(&newer.to_string()), "{message}");
    assert!(message.contains(&PROTOCOL_VERSION.to_string()), "{message}");
}

#[tokio::test]
async fn unexpected_pid_is_refused() {
    let other = me().wrapping_add(1);
    let (result, answer) = accept_after(hello(PROTOCOL_VERSION, me(), TOKEN), Some(other)).await;
    let err = result.expect_err("refused");
    assert!(
        matches!(err, HandshakeError::PidMismatch { expected, got } if expected == other && got == me())
    );
    assert!(matches!(answer, Some(ToWorker::Refused { .. })));
}

#[tokio::test]
async fn hello_claiming_another_pid_is_refused() {
    let (result, _) = accept_after(hello(PROTOCOL_VERSION, 1, TOKEN), None).await;
    let err = result.expect_err("refused");
    assert!(matches!(err, HandshakeError::PidClaimMismatch { claimed: 1, peer } if peer == me()));
}

#[tokio::test]
async fn first_frame_other_than_hello_is_refused() {
    let ready = FromWorker::LoadFailed {
        message: "x".into(),
        permanent: false,
    };
    let (result, _) = accept_after(ready, None).await;
    let err = result.expect_err("refused");
    assert!(matches!(
        err,
        HandshakeError::Unexpected {
            expected: "Hello",
            got: "LoadFailed"
        }
    ));
}

/// Writes raw bytes where `Hello` should be and returns the supervisor's verdict.
async fn accept_raw(bytes: &[u8]) -> HandshakeError {
    let (sup, mut wrk) = UnixStream::pair().expect("socketpair");
    wrk.write_all(bytes).await.expect("write");
    supervisor_accept(sup, TOKEN, None, PATIENCE)
        .await
        .expect_err("garbage is refused")
}

#[tokio::test]
async fn garbage_instead_of_hello_is_an_error() {
    let err = accept_raw(&[0, 0, 0, 4, 0xc1, 0xc1, 0xc1, 0xc1]).await;
    assert!(
        matches!(err, HandshakeError::Codec(CodecError::Decode { .. })),
        "{err}"
    );
}

#[tokio::test]
async fn oversize_length_header_is_an_error() {
    let err = accept_raw(&[0xff, 0xff, 0xff, 0xff]).await;
    assert!(
        matches!(err, HandshakeError::Codec(CodecError::FrameTooLarge { .. })),
        "{err}"
    );
    // Someone pointing an HTTP client at the socket: "GET " reads as a 1.2 GB length.
    let err = accept_raw(b"GET / HTTP/1.1\r\n\r\n").await;
    assert!(
        matches!(err, HandshakeError::Codec(CodecError::FrameTooLarge { .. })),
        "{err}"
    );
}

#[tokio::test]
async fn silent_peer_times_out_with_the_duration_in_the_message() {
    let (sup, _wrk) = UnixStream::pair().expect("socketpair");
    let err = supervisor_accept(sup, TOKEN, None, SHORT)
        .await
        .expect_err("timeout");
    assert!(matches!(
        err,
        HandshakeError::Timeout {
            waiting_for: "Hello",
            ..
        }
    ));
    assert!(err.to_string().contains("0.2 s"), "{err}");
}

#[tokio::test]
async fn peer_closing_before_hello_is_reported() {
    let (sup, wrk) = UnixStream::pair().expect("socketpair");
    drop(wrk);
    let err = supervisor_accept(sup, TOKEN, None, PATIENCE)
        .await
        .expect_err("closed");
    assert!(matches!(err, HandshakeError::Closed), "{err}");
}

#[tokio::test]
async fn worker_rejects_an_answer_other_than_welcome() {
    let (sup, wrk) = UnixStream::pair().expect("socketpair");
    let fake_supervisor = async {
        let mut conn = SupervisorConnection::new(sup);
        conn.recv()
            .await
            .expect("hello decodes")
            .expect("hello arrives");
        conn.send(&ToWorker::GetStats).await.expect("send");
        conn
    };
    let (_conn, joined) = tokio::join!(fake_supervisor, worker_handshake(wrk, TOKEN));
    let err = joined.expect_err("not welcomed");
    assert!(
        matches!(
            err,
            HandshakeError::Unexpected {
                got: "GetStats",
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn worker_sees_a_supervisor_that_hangs_up() {
    let (sup, wrk) = UnixStream::pair().expect("socketpair");
    let fake_supervisor = async {
        let mut conn = SupervisorConnection::new(sup);
        conn.recv()
            .await
            .expect("hello decodes")
            .expect("hello arrives");
    };
    let ((), joined) = tokio::join!(fake_supervisor, worker_handshake(wrk, TOKEN));
    assert!(matches!(joined, Err(HandshakeError::Closed)), "{joined:?}");
}
