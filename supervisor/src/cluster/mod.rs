//! Worker groups that span hosts. Each host runs `corral serve`; the one a model's group is
//! configured on (the coordinator) runs rank 0 and asks the other hosts' corral (their member
//! side, `process::member`) to start the other ranks (`process::remote`). This module holds what
//! both sides share:
//!
//! - `identity`: this host's key pair, which other hosts name in their `[cluster]` tables.
//! - `channel`: a Noise XX session over TCP in which both ends prove their keys (mutual keys).
//! - `wire`: what the two sides say: start a rank, its heartbeats and footprint, its end.
//! - `digest`: a model's files by hash, so a host whose copy differs is refused before start.
//! - `hosts`: the `[cluster]` table: the other hosts, their keys, their ring addresses and RDMA
//!   devices.
//! - `collectives`: which MLX backend joins a group's ranks (ring or JACCL), and what it reads.
//!
//! Only control passes here: the ranks' activations and reductions go over MLX's backend.

mod channel;
mod collectives;
mod digest;
mod hosts;
mod identity;
mod wire;

pub use channel::{Channel, ChannelError, ChannelReader, ChannelWriter};
pub use collectives::{Backend, Collectives};
pub use digest::ModelDigest;
pub use hosts::{Cluster, ClusterConfig, HostEntry};
pub use identity::{Identity, PublicKey};
pub use wire::{FromMember, RankSettings, RankStart, ToMember};
