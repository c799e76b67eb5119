//! How a group's ranks reach each other: which of MLX's distributed backends joins them, and
//! what that backend reads to do it. corral only writes MLX's own files and environment; the
//! collectives themselves are MLX's.

use serde::{Deserialize, Serialize};

/// MLX's backend for groups that span hosts (`[cluster] backend`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// TCP between neighbours, over Ethernet or Thunderbolt networking.
    #[default]
    Ring,
    /// RDMA over Thunderbolt 5 (macOS 26.2 and later): every host linked to every other.
    Jaccl,
}

/// One start of a group's backend: what each rank joins by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Collectives {
    /// Each rank's ring addresses: MLX's `MLX_HOSTFILE`.
    Ring(Vec<Vec<String>>),
    /// Where rank 0 listens for the others (`MLX_JACCL_COORDINATOR`), and the RDMA device that
    /// links each rank to each other rank, `None` for itself (`MLX_IBV_DEVICES`).
    Jaccl {
        coordinator: String,
        devices: Vec<Vec<Option<String>>>,
    },
}

impl Collectives {
    pub fn ranks(&self) -> usize {
        match self {
            Self::Ring(ring) => ring.len(),
            Self::Jaccl { devices, .. } => devices.len(),
        }
    }

    /// The worker's `--backend`, MLX's name for it.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Ring(_) => "ring",
            Self::Jaccl { .. } => "jaccl",
        }
    }

    /// The file MLX reads as each rank joins, and the variable that names it.
    pub fn file(&self) -> serde_json::Result<(&'static str, Vec<u8>)> {
        Ok(match self {
            Self::Ring(ring) => (corral_ipc::GROUP_HOSTFILE_ENV, serde_json::to_vec(ring)?),
            Self::Jaccl { devices, .. } => {
                (corral_ipc::GROUP_DEVICES_ENV, serde_json::to_vec(devices)?)
            }
        })
    }

    /// Any other variable the backend reads, beside the rank and the file.
    pub fn environment(&self) -> Option<(&'static str, &str)> {
        match self {
            Self::Ring(_) => None,
            Self::Jaccl { coordinator, .. } => {
                Some((corral_ipc::GROUP_COORDINATOR_ENV, coordinator))
            }
        }
    }
}
