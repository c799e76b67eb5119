//! What a coordinator and a member say to each other, one frame at a time.

use serde::{Deserialize, Serialize};

use super::collectives::Collectives;
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
    /// What every rank joins the group by.
    pub collectives: Collectives,
    /// The rank's share of the memory budget.
    pub memory_limit: u64,
    /// The coordinator's files of the model, which the member's must equal.
    pub files: ModelDigest,
    /// The coordinator's settings for the model, which every rank must share.
    pub settings: RankSettings,
}

/// What every rank of a group runs its model with, whichever host it is on: a rank whose batch
/// took other decisions than rank 0's would fall out of step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankSettings {
    /// `corral-worker serve` options that name no file (batch size, speculation, ...).
    pub flags: Vec<String>,
    /// The draft model's id, which each host finds in its own registry.
    pub draft: Option<String>,
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
