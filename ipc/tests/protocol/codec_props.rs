//! Property tests: no input, however malformed, makes the decoder panic, and frames reassemble
//! across any split of the byte stream.

use corral_ipc::*;
use proptest::prelude::*;

use crate::chunked::{Chunked, block_on};
use crate::samples;

/// Every sample in both directions, encoded, so corruption starts from realistic frames.
fn sample_frames() -> Vec<Vec<u8>> {
    let to = samples::to_worker().into_iter().map(|m| encode_frame(&m));
    let from = samples::from_worker().into_iter().map(|m| encode_frame(&m));
    to.chain(from).map(|f| f.expect("sample encodes")).collect()
}

/// Decodes as both message types; the assertion is only that this returns, with a sane length.
fn decode_both(bytes: &[u8]) {
    if let Ok(Some((_, used))) = decode_frame::<ToWorker>(bytes) {
        assert!(used <= bytes.len());
    }
    if let Ok(Some((_, used))) = decode_frame::<FromWorker>(bytes) {
        assert!(used <= bytes.len());
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        decode_both(&bytes);
    }

    /// Random bytes rarely form a plausible header, so also give random bodies a correct one:
    /// this is what drives the MessagePack decoder itself.
    #[test]
    fn random_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend(&body);
        decode_both(&frame);
    }

    #[test]
    fn every_strict_prefix_of_a_frame_asks_for_more(index in any::<prop::sample::Index>(), cut in any::<prop::sample::Index>()) {
        let frames = sample_frames();
        let frame = &frames[index.index(frames.len())];
        let prefix = &frame[..cut.index(frame.len())];
        prop_assert!(decode_frame::<ToWorker>(prefix).expect("prefix is not an error").is_none());
        prop_assert!(decode_frame::<FromWorker>(prefix).expect("prefix is not an error").is_none());
    }

    #[test]
    fn corrupted_frames_never_panic(
        index in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1..=255u8), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let frames = sample_frames();
        let mut frame = frames[index.index(frames.len())].clone();
        for (at, mask) in flips {
            let at = at.index(frame.len());
            frame[at] ^= mask;
        }
        decode_both(&frame);
        decode_both(&frame[..cut.index(frame.len())]);
    }

    #[test]
    fn frames_reassemble_across_any_split(
        picks in prop::collection::vec(any::<prop::sample::Index>(), 1..6),
        cuts in prop::collection::vec(1..64usize, 0..40),
    ) {
        let all = samples::from_worker();
        let sent: Vec<_> = picks.iter().map(|i| all[i.index(all.len())].clone()).collect();
        let mut stream = Vec::new();
        for msg in &sent {
            stream.extend(encode_frame(msg).expect("encodes"));
        }
        let received = block_on(async {
            let mut reader = FrameReader::<_, FromWorker>::new(Chunked::new(&stream, &cuts));
            let mut received = Vec::new();
            while let Some(msg) = reader.read_frame().await.expect("reads") {
                received.push(msg);
            }
            received
        });
        prop_assert_eq!(received, sent);
    }

    #[test]
    fn a_stream_cut_mid_frame_ends_in_truncation(
        picks in prop::collection::vec(any::<prop::sample::Index>(), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let all = samples::to_worker();
        let mut stream = Vec::new();
        let mut ends = Vec::new();
        for pick in &picks {
            stream.extend(encode_frame(&all[pick.index(all.len())]).expect("encodes"));
            ends.push(stream.len());
        }
        let cut = cut.index(stream.len());
        let whole_frames = ends.iter().filter(|&&end| end <= cut).count();
        let outcome = block_on(async {
            let mut reader = FrameReader::<_, ToWorker>::new(Chunked::new(&stream[..cut], &[7]));
            let mut count = 0;
            loop {
                match reader.read_frame().await {
                    Ok(Some(_)) => count += 1,
                    Ok(None) => return (count, None),
                    Err(err) => return (count, Some(err)),
                }
            }
        });
        prop_assert_eq!(outcome.0, whole_frames);
        let at_boundary = cut == 0 || ends.contains(&cut);
        match outcome.1 {
            None => prop_assert!(at_boundary),
            Some(CodecError::Truncated { .. }) => prop_assert!(!at_boundary),
            Some(other) => prop_assert!(false, "unexpected error {}", other),
        }
    }
}
