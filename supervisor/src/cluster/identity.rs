//! This host's cluster key pair: made on first use in the state directory, readable only by
//! this user. The public half, in hex, is what other hosts put in their `[cluster]` tables.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{Context, Result, bail};

/// The Noise protocol the cluster's sessions speak (`channel.rs`), whose curve the keys are on.
const NOISE_PARAMS: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";

pub(super) fn noise_params() -> Result<snow::params::NoiseParams, snow::Error> {
    NOISE_PARAMS.parse()
}

const KEY_FILE: &str = "cluster.key";
const KEY_BYTES: usize = 32;

/// A host's public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct PublicKey([u8; KEY_BYTES]);

impl TryFrom<String> for PublicKey {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        Self::parse(&text).map_err(|error| error.to_string())
    }
}

impl PublicKey {
    /// `text`: 64 hex digits, as `corral key` prints them.
    pub fn parse(text: &str) -> Result<Self> {
        let bytes = from_hex(text.trim())
            .with_context(|| format!("{text:?} is not a cluster key: 64 hex digits expected"))?;
        Ok(Self(bytes))
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

pub struct Identity {
    private: [u8; KEY_BYTES],
    public: PublicKey,
}

impl Identity {
    /// The key pair in `state_dir`, made there now if it has none.
    pub fn load_or_create(state_dir: &Path) -> Result<Self> {
        let path = state_dir.join(KEY_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Self::parse(&text).with_context(|| format!("reading {}", path.display())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let identity = Self::generate()?;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(state_dir)
                    .with_context(|| format!("creating {}", state_dir.display()))?;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .with_context(|| format!("creating {}", path.display()))?;
                let private: String = identity
                    .private
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                writeln!(file, "{private}\n{}", identity.public)
                    .with_context(|| format!("writing {}", path.display()))?;
                Ok(identity)
            }
            Err(error) => Err(error).with_context(|| format!("reading {}", path.display())),
        }
    }

    fn generate() -> Result<Self> {
        let builder = snow::Builder::new(noise_params()?);
        let keys = builder
            .generate_keypair()
            .context("making the cluster key")?;
        Ok(Self {
            private: keys
                .private
                .as_slice()
                .try_into()
                .context("the cluster key's private half")?,
            public: PublicKey::from_bytes(&keys.public).context("the cluster key's public half")?,
        })
    }

    fn parse(text: &str) -> Result<Self> {
        let mut lines = text.lines();
        let (Some(private), Some(public)) = (lines.next(), lines.next()) else {
            bail!("a cluster key file holds two lines: the private key, then the public one");
        };
        Ok(Self {
            private: from_hex(private).context("the private key")?,
            public: PublicKey::parse(public)?,
        })
    }

    pub fn public(&self) -> PublicKey {
        self.public
    }

    pub(super) fn private(&self) -> &[u8] {
        &self.private
    }
}

fn from_hex(text: &str) -> Option<[u8; KEY_BYTES]> {
    if text.len() != KEY_BYTES * 2 || !text.is_ascii() {
        return None;
    }
    let mut bytes = [0u8; KEY_BYTES];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_private_to_its_user_and_read_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let made = Identity::load_or_create(dir.path()).unwrap();
        let read = Identity::load_or_create(dir.path()).unwrap();
        assert_eq!(made.public(), read.public());
        assert_eq!(made.private(), read.private());
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
        let text = made.public().to_string();
        assert_eq!(PublicKey::parse(&text).unwrap(), made.public());
        assert!(PublicKey::parse("abc").is_err());
        assert!(PublicKey::parse(&"zz".repeat(32)).is_err());
    }
}
