//! What a coordinator and a member say to each other, one frame at a time.

use serde::{Deserialize, Serialize};

use super::digest::ModelDigest;

/// From the coordinator.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToMember {
    /// Start one rank of a group; the member answers `Started` or `Refused`.
    Start(RankStart),
    /// The group has ended: end the rank, then say `Ended`.
    Stop,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RankStart {
    /// The model's id, which the member finds by its own discovery.
    pub model: String,
    pub rank: usize,
    /// `pipeline` or `tensor`.
    pub parallel: String,
    /// The ring's addresses, one list per rank (MLX's host file).
    pub ring: Vec<Vec<String>>,
    /// The rank's share of the memory budget.
    pub memory_limit: u64,
    /// The coordinator's files of the model, which the member's must equal.
    pub files: ModelDigest,
}

/// From the member.
#[derive(Debug, Serialize, Deserialize)]
pub enum FromMember {
    /// The rank cannot start here, and why.
    Refused(String),
    Started {
        pid: u32,
    },
    /// The rank lives; every heartbeat it writes, with its footprint now.
    Beat {
        footprint: Option<u64>,
    },
    /// The rank has ended and been reaped; `clean`: it exited 0, as ranks do when their group
    /// shuts down.
    Ended {
        status: String,
        clean: bool,
    },
}
