//! The `[cluster]` table: whether this host takes rank starts (`listen`, `coordinators`), which of
//! MLX's backends joins groups that span hosts (`backend`), where its own ranks join them
//! (`ring`, and `rdma` under JACCL), and the hosts it may start ranks on (`[cluster.hosts.NAME]`:
//! the member's address, its key, its ranks' ring address, its RDMA devices).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use tokio::net::TcpStream;

use super::channel::Channel;
use super::collectives::{Backend, Collectives};
use super::identity::{Identity, PublicKey};

/// The names a rank on this host goes by in a model's `hosts`.
const THIS_HOST: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// How long reaching a member may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Where this host takes rank starts from coordinators; none: it takes none. Loopback
    /// unless the operator names another address.
    pub listen: Option<SocketAddr>,
    /// The keys of the hosts whose groups may start ranks here.
    #[serde(default)]
    pub coordinators: Vec<PublicKey>,
    /// MLX's backend for groups that span hosts; groups on this host alone join a loopback ring.
    #[serde(default)]
    pub backend: Backend,
    /// This host's ring address, as the other hosts reach it, for its ranks in a group that
    /// spans hosts; its second rank in one group takes the next port, and so on. Under JACCL,
    /// where rank 0 listens for the other ranks.
    pub ring: Option<SocketAddr>,
    /// Under JACCL: this host's RDMA device to each other host, by the host's name.
    #[serde(default)]
    pub rdma: BTreeMap<String, String>,
    #[serde(default)]
    pub hosts: BTreeMap<String, HostEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostEntry {
    /// Where the host's corral takes rank starts (its `[cluster] listen`).
    pub address: String,
    /// The host's key, as `corral key` prints it there.
    pub key: PublicKey,
    /// Where the host's ranks join the ring; its second rank takes the next port.
    pub ring: SocketAddr,
    /// Under JACCL: the host's RDMA device to each other host, this one named `localhost`.
    #[serde(default)]
    pub rdma: BTreeMap<String, String>,
}

impl ClusterConfig {
    pub fn is_local(host: &str) -> bool {
        THIS_HOST.contains(&host)
    }

    /// Refuses a table this corral cannot act on, naming the key.
    pub fn check(&self) -> Result<(), String> {
        if self.listen.is_some() && self.coordinators.is_empty() {
            return Err("[cluster] listen is set, but no coordinators may start ranks: name their keys in coordinators".to_owned());
        }
        if let Some(name) = self.hosts.keys().find(|name| Self::is_local(name)) {
            return Err(format!(
                "[cluster.hosts.{name:?}] names this host; its ranks need no entry"
            ));
        }
        Ok(())
    }

    /// Refuses a group whose `hosts` this corral cannot start, naming the problem.
    pub fn check_group(&self, hosts: &[String]) -> Result<(), String> {
        if let Some(host) = hosts
            .iter()
            .find(|host| !Self::is_local(host) && !self.hosts.contains_key(*host))
        {
            return Err(format!(
                "host {host:?} is not known: name this host \"localhost\", and each other host in [cluster.hosts.NAME] with its address, key and ring"
            ));
        }
        let spans_hosts = hosts.iter().any(|host| !Self::is_local(host));
        if spans_hosts && !hosts.first().is_some_and(|host| Self::is_local(host)) {
            return Err(
                "the first host runs rank 0, which answers this corral: name \"localhost\" first"
                    .to_owned(),
            );
        }
        if spans_hosts && self.ring.is_none() {
            return Err("the group spans hosts, so this host's ranks need an address the others reach: set [cluster] ring".to_owned());
        }
        if spans_hosts {
            self.collectives(hosts)?;
        }
        Ok(())
    }

    /// What the ranks of a group over `hosts` that spans hosts join by, under `[cluster]
    /// backend`.
    pub fn collectives(&self, hosts: &[String]) -> Result<Collectives, String> {
        match self.backend {
            Backend::Ring => self.ring(hosts).map(Collectives::Ring),
            Backend::Jaccl => {
                let coordinator = self
                    .ring
                    .ok_or("[cluster] ring is not set: JACCL's rank 0 listens there")?;
                Ok(Collectives::Jaccl {
                    coordinator: coordinator.to_string(),
                    devices: self.rdma_devices(hosts)?,
                })
            }
        }
    }

    /// Each rank's ring address: a host's ranks take successive ports from its configured one.
    fn ring(&self, hosts: &[String]) -> Result<Vec<Vec<String>>, String> {
        let mut taken: BTreeMap<&str, u16> = BTreeMap::new();
        hosts
            .iter()
            .map(|host| {
                let base = if Self::is_local(host) {
                    self.ring
                        .ok_or("[cluster] ring is not set for this host's ranks")?
                } else {
                    self.entry(host)?.ring
                };
                let offset = taken.entry(Self::name(host)).or_default();
                let port = base.port().checked_add(*offset).ok_or_else(|| {
                    format!("host {host:?}'s ranks run out of ports after {base}")
                })?;
                *offset += 1;
                Ok(vec![SocketAddr::new(base.ip(), port).to_string()])
            })
            .collect()
    }

    /// The RDMA device that links each rank's host to each other rank's: JACCL links hosts
    /// pairwise, so a host runs one rank of a group.
    fn rdma_devices(&self, hosts: &[String]) -> Result<Vec<Vec<Option<String>>>, String> {
        let names: Vec<&str> = hosts.iter().map(|host| Self::name(host)).collect();
        if let Some((index, name)) = names
            .iter()
            .enumerate()
            .find(|(index, name)| names[..*index].contains(name))
            .map(|(index, name)| (index, *name))
        {
            return Err(format!(
                "JACCL links each host to each other once, so a group runs one rank per host: host {name:?} is named again as rank {index}'s"
            ));
        }
        names
            .iter()
            .map(|from| {
                let (table, devices) = if *from == "localhost" {
                    ("[cluster] rdma".to_owned(), &self.rdma)
                } else {
                    (
                        format!("[cluster.hosts.{from}] rdma"),
                        &self.entry(from)?.rdma,
                    )
                };
                names
                    .iter()
                    .map(|to| {
                        if to == from {
                            return Ok(None);
                        }
                        let device = devices.get(*to).ok_or_else(|| {
                            format!(
                                "no RDMA device links host {from:?} to {to:?}: set {to} in {table}"
                            )
                        })?;
                        Ok(Some(device.clone()))
                    })
                    .collect()
            })
            .collect()
    }

    /// A host's name in the tables: this one is `localhost` whichever way `hosts` names it.
    fn name(host: &str) -> &str {
        if Self::is_local(host) {
            "localhost"
        } else {
            host
        }
    }

    fn entry(&self, host: &str) -> Result<&HostEntry, String> {
        self.hosts
            .get(host)
            .ok_or_else(|| format!("host {host:?} is not in [cluster.hosts]"))
    }
}

/// The hosts this corral may start ranks on, and the key it proves itself with.
pub struct Cluster {
    identity: Identity,
    config: ClusterConfig,
}

impl Cluster {
    pub fn new(identity: Identity, config: ClusterConfig) -> Self {
        Self { identity, config }
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// A session with `host`'s member; the error names the host and its address.
    pub async fn connect(&self, host: &str) -> Result<Channel, String> {
        let entry = self.config.entry(host)?;
        let failed = |what: String| format!("host {host:?} ({}): {what}", entry.address);
        let stream =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(entry.address.as_str()))
                .await
                .map_err(|_| failed(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))?
                .map_err(|error| failed(format!("cannot connect: {error}")))?;
        Channel::connect(stream, &self.identity, entry.key)
            .await
            .map_err(|error| failed(error.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> PublicKey {
        PublicKey::from_bytes(&[byte; 32]).unwrap()
    }

    fn config() -> ClusterConfig {
        ClusterConfig {
            ring: Some("10.0.0.1:7840".parse().unwrap()),
            hosts: BTreeMap::from([(
                "mac2".to_owned(),
                HostEntry {
                    address: "10.0.0.2:7830".to_owned(),
                    key: key(2),
                    ring: "10.0.0.2:7840".parse().unwrap(),
                    rdma: BTreeMap::new(),
                },
            )]),
            ..ClusterConfig::default()
        }
    }

    #[test]
    fn a_hosts_ranks_take_successive_ports_from_its_ring_address() {
        let hosts = ["localhost", "mac2", "127.0.0.1", "mac2"].map(String::from);
        let ring = [
            ["10.0.0.1:7840"],
            ["10.0.0.2:7840"],
            ["10.0.0.1:7841"],
            ["10.0.0.2:7841"],
        ]
        .map(|addresses| addresses.map(String::from).to_vec());
        assert_eq!(
            config().collectives(&hosts),
            Ok(Collectives::Ring(ring.to_vec()))
        );
    }

    /// mlx.distributed_config's layout: row i holds rank i's device to each other rank.
    #[test]
    fn jaccl_links_each_hosts_rank_to_each_other_by_the_device_each_host_names() {
        let mut config = config();
        config.backend = Backend::Jaccl;
        config.rdma = BTreeMap::from([
            ("mac2".to_owned(), "rdma_en5".to_owned()),
            ("mac3".to_owned(), "rdma_en4".to_owned()),
        ]);
        config.hosts.get_mut("mac2").unwrap().rdma = BTreeMap::from([
            ("localhost".to_owned(), "rdma_en5".to_owned()),
            ("mac3".to_owned(), "rdma_en3".to_owned()),
        ]);
        let mut mac3 = config.hosts["mac2"].clone();
        mac3.rdma = BTreeMap::from([
            ("localhost".to_owned(), "rdma_en4".to_owned()),
            ("mac2".to_owned(), "rdma_en3".to_owned()),
        ]);
        config.hosts.insert("mac3".to_owned(), mac3);
        let hosts = ["localhost", "mac2", "mac3"].map(String::from);
        let device = |name: &str| Some(name.to_owned());
        assert_eq!(
            config.collectives(&hosts),
            Ok(Collectives::Jaccl {
                coordinator: "10.0.0.1:7840".to_owned(),
                devices: vec![
                    vec![None, device("rdma_en5"), device("rdma_en4")],
                    vec![device("rdma_en5"), None, device("rdma_en3")],
                    vec![device("rdma_en4"), device("rdma_en3"), None],
                ],
            })
        );
        assert_eq!(config.check_group(&hosts), Ok(()));
        // Local groups join a loopback ring whatever the backend.
        assert_eq!(
            config.check_group(&["localhost", "localhost"].map(String::from)),
            Ok(())
        );
        let refused = [
            (vec!["localhost", "mac2", "mac2"], "one rank per host"),
            (vec!["localhost", "mac2", "127.0.0.1"], "one rank per host"),
        ];
        for (hosts, reason) in refused {
            let hosts: Vec<String> = hosts.into_iter().map(String::from).collect();
            let error = config.check_group(&hosts).unwrap_err();
            assert!(error.contains(reason), "{hosts:?}: {error}");
        }
        config.hosts.get_mut("mac3").unwrap().rdma.remove("mac2");
        assert_eq!(
            config.check_group(&hosts),
            Err("no RDMA device links host \"mac3\" to \"mac2\": set mac2 in [cluster.hosts.mac3] rdma".to_owned())
        );
    }

    #[test]
    fn groups_this_corral_cannot_start_are_refused_with_the_reason() {
        let config = config();
        let hosts = |names: &[&str]| {
            names
                .iter()
                .map(|name| name.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(config.check_group(&hosts(&["localhost", "mac2"])), Ok(()));
        assert_eq!(
            config.check_group(&hosts(&["localhost", "localhost"])),
            Ok(())
        );
        let refused = [
            (hosts(&["localhost", "mac3"]), "host \"mac3\" is not known"),
            (hosts(&["mac2", "localhost"]), "name \"localhost\" first"),
        ];
        for (hosts, reason) in refused {
            let error = config.check_group(&hosts).unwrap_err();
            assert!(error.contains(reason), "{hosts:?}: {error}");
        }
        let no_ring = ClusterConfig {
            ring: None,
            ..config.clone()
        };
        assert!(
            no_ring
                .check_group(&hosts(&["localhost", "mac2"]))
                .unwrap_err()
                .contains("set [cluster] ring")
        );
        let listening = ClusterConfig {
            listen: Some("127.0.0.1:7830".parse().unwrap()),
            ..ClusterConfig::default()
        };
        assert!(listening.check().unwrap_err().contains("coordinators"));
    }
}
