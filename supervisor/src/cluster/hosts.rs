//! The `[cluster]` table: whether this host takes rank starts (`listen`, `coordinators`), where
//! its own ranks join a ring that spans hosts (`ring`), and the hosts it may start ranks on
//! (`[cluster.hosts.NAME]`: the member's address, its key, its ranks' ring address).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use tokio::net::TcpStream;

use super::channel::Channel;
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
    /// This host's ring address, as the other hosts reach it, for its ranks in a group that
    /// spans hosts; its second rank in one group takes the next port, and so on.
    pub ring: Option<SocketAddr>,
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
        Ok(())
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

    /// Each rank's ring address for a group over `hosts` that spans hosts: a host's ranks take
    /// successive ports from its configured one.
    pub fn ring(&self, hosts: &[String]) -> Result<Vec<Vec<String>>, String> {
        let mut taken: BTreeMap<&str, u16> = BTreeMap::new();
        hosts
            .iter()
            .map(|host| {
                let base = if ClusterConfig::is_local(host) {
                    self.config
                        .ring
                        .ok_or("[cluster] ring is not set for this host's ranks")?
                } else {
                    self.entry(host)?.ring
                };
                let key = if ClusterConfig::is_local(host) {
                    "localhost"
                } else {
                    host
                };
                let offset = taken.entry(key).or_default();
                let port = base.port().checked_add(*offset).ok_or_else(|| {
                    format!("host {host:?}'s ranks run out of ports after {base}")
                })?;
                *offset += 1;
                Ok(vec![SocketAddr::new(base.ip(), port).to_string()])
            })
            .collect()
    }

    /// A session with `host`'s member; the error names the host and its address.
    pub async fn connect(&self, host: &str) -> Result<Channel, String> {
        let entry = self.entry(host)?;
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

    fn entry(&self, host: &str) -> Result<&HostEntry, String> {
        self.config
            .hosts
            .get(host)
            .ok_or_else(|| format!("host {host:?} is not in [cluster.hosts]"))
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
                },
            )]),
            ..ClusterConfig::default()
        }
    }

    #[test]
    fn a_hosts_ranks_take_successive_ports_from_its_ring_address() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::new(Identity::load_or_create(dir.path()).unwrap(), config());
        let hosts = ["localhost", "mac2", "127.0.0.1", "mac2"].map(String::from);
        assert_eq!(
            cluster.ring(&hosts).unwrap(),
            [
                ["10.0.0.1:7840"],
                ["10.0.0.2:7840"],
                ["10.0.0.1:7841"],
                ["10.0.0.2:7841"]
            ]
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
