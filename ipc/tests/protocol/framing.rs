//! Framing edge cases: partial input, oversize headers, undecodable bodies, and the async
//! reader's end-of-stream and cancellation behaviour.

use std::time::Duration;

use corral_ipc::*;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use crate::chunked::{Chunked, block_on};
use crate::samples;

fn header(len: u32) -> [u8; HEADER_BYTES] {
    len.to_be_bytes()
}

#[test]
fn header_is_the_big_endian_body_length() {
    let frame = encode_frame(&ToWorker::Cancel { id: 1 }).expect("encodes");
    let len = u32::from_be_bytes(frame[..4].try_into().expect("4 bytes"));
    assert_eq!(len as usize, frame.len() - HEADER_BYTES);
}

#[test]
fn incomplete_input_asks_for_more() {
    assert!(decode_frame::<ToWorker>(&[]).expect("ok").is_none());
    assert!(decode_frame::<ToWorker>(&[0, 0, 1]).expect("ok").is_none());
    let max = header(MAX_FRAME_BYTES as u32);
    assert!(
        decode_frame::<ToWorker>(&max)
            .expect("max is allowed")
            .is_none()
    );
}

#[test]
fn oversize_header_fails_before_any_body_arrives() {
    let err = decode_frame::<ToWorker>(&header(MAX_FRAME_BYTES as u32 + 1)).expect_err("too big");
    assert!(
        matches!(err, CodecError::FrameTooLarge { len, max } if len == MAX_FRAME_BYTES + 1 && max == MAX_FRAME_BYTES)
    );
}

#[test]
fn back_to_back_frames_decode_one_at_a_time() {
    let mut bytes = encode_frame(&ToWorker::GetStats).expect("encodes");
    let first_len = bytes.len();
    bytes.extend(encode_frame(&ToWorker::Shutdown).expect("encodes"));
    let (first, used) = decode_frame::<ToWorker>(&bytes)
        .expect("ok")
        .expect("complete");
    assert_eq!((first, used), (ToWorker::GetStats, first_len));
    let (second, _) = decode_frame::<ToWorker>(&bytes[used..])
        .expect("ok")
        .expect("complete");
    assert_eq!(second, ToWorker::Shutdown);
}

#[test]
fn undecodable_body_carries_the_decoder_message() {
    let mut frame = header(3).to_vec();
    frame.extend([0xc1, 0xff, 0x00]); // 0xc1 is never used in MessagePack
    let err = decode_frame::<FromWorker>(&frame).expect_err("garbage");
    let CodecError::Decode { len: 3, reason } = &err else {
        panic!("expected a decode error, got {err}");
    };
    assert!(err.to_string().contains(&reason.to_string()), "{err}");
}

#[test]
fn trailing_bytes_inside_a_frame_are_an_error() {
    let body = &encode_frame(&ToWorker::Shutdown).expect("encodes")[HEADER_BYTES..];
    let mut frame = header(body.len() as u32 + 2).to_vec();
    frame.extend(body);
    frame.extend([0xc0, 0xc0]);
    let err = decode_frame::<ToWorker>(&frame).expect_err("trailing");
    assert!(
        matches!(err, CodecError::TrailingBytes { extra: 2, .. }),
        "{err}"
    );
}

#[test]
fn oversize_message_is_refused_on_encode() {
    let request = samples::generate_request(Prompt::Text("x".repeat(MAX_FRAME_BYTES)));
    let err = encode_frame(&ToWorker::Generate {
        id: 1,
        request: Box::new(request),
    })
    .expect_err("too big");
    assert!(matches!(err, CodecError::FrameTooLarge { .. }), "{err}");
}

#[test]
fn reader_distinguishes_clean_end_from_truncation() {
    let frame = encode_frame(&ToWorker::GetStats).expect("encodes");
    block_on(async {
        let mut clean = FrameReader::<_, ToWorker>::new(Chunked::new(&frame, &[]));
        assert_eq!(
            clean.read_frame().await.expect("ok"),
            Some(ToWorker::GetStats)
        );
        assert!(clean.read_frame().await.expect("clean end").is_none());

        let mut mid_header = FrameReader::<_, ToWorker>::new(Chunked::new(&frame[..2], &[]));
        let err = mid_header.read_frame().await.expect_err("truncated");
        assert!(
            matches!(
                err,
                CodecError::Truncated {
                    got: 2,
                    expected: 4
                }
            ),
            "{err}"
        );

        let cut = frame.len() - 1;
        let mut mid_body = FrameReader::<_, ToWorker>::new(Chunked::new(&frame[..cut], &[1]));
        let err = mid_body.read_frame().await.expect_err("truncated");
        assert!(
            matches!(err, CodecError::Truncated { got, expected } if got == cut && expected == frame.len()),
            "{err}"
        );
    });
}

#[tokio::test]
async fn near_maximum_frame_crosses_a_real_socket() {
    let (a, b) = UnixStream::pair().expect("socketpair");
    let text = "y".repeat(MAX_FRAME_BYTES - 1024);
    let msg = ToWorker::Generate {
        id: 1,
        request: Box::new(samples::generate_request(Prompt::Text(text))),
    };
    let sent = msg.clone();
    let writer = tokio::spawn(async move {
        let mut writer = FrameWriter::<_, ToWorker>::new(a);
        writer.write_frame(&sent).await.expect("write");
    });
    let mut reader = FrameReader::<_, ToWorker>::new(b);
    assert_eq!(reader.read_frame().await.expect("read"), Some(msg));
    writer.await.expect("writer task");
    assert!(reader.read_frame().await.expect("clean end").is_none());
}

#[tokio::test]
async fn cancelled_read_loses_no_bytes() {
    let (mut a, b) = UnixStream::pair().expect("socketpair");
    let frame = encode_frame(&ToWorker::Cancel { id: 77 }).expect("encodes");
    let mut reader = FrameReader::<_, ToWorker>::new(b);
    a.write_all(&frame[..3]).await.expect("write");
    tokio::select! {
        read = reader.read_frame() => panic!("a partial frame produced {read:?}"),
        () = tokio::time::sleep(Duration::from_millis(50)) => {}
    }
    a.write_all(&frame[3..]).await.expect("write");
    assert_eq!(
        reader.read_frame().await.expect("read"),
        Some(ToWorker::Cancel { id: 77 })
    );
}

#[test]
fn huge_lengths_inside_a_body_fail_without_allocating_them() {
    // str32, bin32, array32 and map32 markers each claiming 4 GiB that the frame does not hold.
    for marker in [0xdb, 0xc6, 0xdd, 0xdf] {
        let mut frame = header(5).to_vec();
        frame.extend([marker, 0xff, 0xff, 0xff, 0xff]);
        let err = decode_frame::<ToWorker>(&frame).expect_err("lies about its length");
        assert!(matches!(err, CodecError::Decode { .. }), "{err}");
    }
    // The same lie deep inside a real message, where a Vec<u32> would be sized from it.
    let request = samples::generate_request(Prompt::Tokens(vec![0xabcd]));
    let frame = encode_frame(&ToWorker::Generate {
        id: 1,
        request: Box::new(request),
    })
    .expect("encodes");
    let one_token = [0x91, 0xcd, 0xab, 0xcd];
    let at = frame
        .windows(one_token.len())
        .position(|w| w == one_token)
        .expect("the token array is in the frame");
    let mut body = frame[HEADER_BYTES..at].to_vec();
    body.extend([0xdd, 0xff, 0xff, 0xff, 0xff]);
    body.extend(&frame[at + 1..]);
    let mut lying = header(body.len() as u32).to_vec();
    lying.extend(body);
    let err = decode_frame::<ToWorker>(&lying).expect_err("lies about its length");
    assert!(matches!(err, CodecError::Decode { .. }), "{err}");
}
