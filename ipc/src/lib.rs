//! The wire protocol between the supervisor and its workers: the message types, the framed
//! MessagePack codec, and the connection and handshake helpers both sides share.
//!
//! It is the only crate both `corral` and `corral-worker` link, so it stays small and free of
//! policy: it knows how to move and check frames, not what a worker does with them.

pub mod codec;
pub mod connection;
pub mod describe;
pub mod framed;
pub mod handshake;
pub mod message;
pub mod sampling;
pub mod weight_files;

pub use codec::{CodecError, HEADER_BYTES, MAX_FRAME_BYTES, decode_frame, encode_frame};
pub use connection::{Connection, SupervisorConnection, WorkerConnection};
pub use describe::{CacheSize, ModelDescription, ModelFormat, ModelKind, MtpLayers, WindowedCache};
pub use framed::{FrameReader, FrameWriter};
pub use handshake::{
    HANDSHAKE_TIMEOUT, HandshakeError, WORKER_TOKEN_ENV, supervisor_accept, tokens_match,
    worker_handshake,
};
pub use message::*;
pub use sampling::SamplingValues;
pub use weight_files::weight_files;

/// The environment MLX's distributed backends read, which the supervisor sets for each rank of a
/// worker group: the rank; for the ring, the JSON host file that lists every rank's address; for
/// JACCL, where rank 0 listens and the JSON file of the RDMA devices between each two ranks.
pub const GROUP_RANK_ENV: &str = "MLX_RANK";
pub const GROUP_HOSTFILE_ENV: &str = "MLX_HOSTFILE";
pub const GROUP_COORDINATOR_ENV: &str = "MLX_JACCL_COORDINATOR";
pub const GROUP_DEVICES_ENV: &str = "MLX_IBV_DEVICES";
