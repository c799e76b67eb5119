//! How a group's ranks reach each other: which of MLX's distributed backends joins them, and
//! what that backend reads to do it. corral only writes MLX's own files and environment; the
//! collectives themselves are MLX's.

use std::net::SocketAddr;

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

    /// Refuses what no coordinator of ours sends: an address that is not one, a device matrix
    /// that is not square, a device name that is not a plain word.
    pub fn check(&self) -> Result<(), String> {
        let address = |text: &str| {
            text.parse::<SocketAddr>()
                .map(drop)
                .map_err(|_| format!("{text:?} is not an address"))
        };
        match self {
            Self::Ring(ring) => ring.iter().flatten().try_for_each(|text| address(text)),
            Self::Jaccl {
                coordinator,
                devices,
            } => {
                address(coordinator)?;
                let plain = |name: &String| {
                    !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                };
                for (rank, row) in devices.iter().enumerate() {
                    if row.len() != devices.len() {
                        return Err(format!("rank {rank}'s RDMA devices are not one per rank"));
                    }
                    if let Some(name) = row.iter().flatten().find(|name| !plain(name)) {
                        return Err(format!("{name:?} is not an RDMA device's name"));
                    }
                }
                Ok(())
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_takes_only_addresses_and_plain_device_names() {
        let ring = |address: &str| Collectives::Ring(vec![vec![address.to_owned()]]);
        assert_eq!(ring("10.0.0.2:7840").check(), Ok(()));
        assert!(ring("mac2:7840; rm").check().is_err());
        let jaccl = |coordinator: &str, device: &str| Collectives::Jaccl {
            coordinator: coordinator.to_owned(),
            devices: vec![
                vec![None, Some(device.to_owned())],
                vec![Some("rdma_en3".to_owned()), None],
            ],
        };
        assert_eq!(jaccl("10.0.0.1:7840", "rdma_en5").check(), Ok(()));
        assert!(jaccl("10.0.0.1", "rdma_en5").check().is_err());
        assert!(jaccl("10.0.0.1:7840", "../en5").check().is_err());
        let lopsided = Collectives::Jaccl {
            coordinator: "10.0.0.1:7840".to_owned(),
            devices: vec![vec![None]; 2],
        };
        assert!(lopsided.check().unwrap_err().contains("one per rank"));
    }
}
