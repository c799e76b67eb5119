//! The protocol crate's tests, in one binary so the slow link happens once: message round trips
//! and compatibility, framing edge cases and fuzzing, and the handshake over real sockets.

mod chunked;
mod codec_props;
mod framing;
mod handshake;
mod messages;
mod samples;
mod session;
