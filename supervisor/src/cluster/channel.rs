//! A Noise session over TCP (Noise_XX: each end sends its static key and proves it holds the
//! private half), carrying rmp frames. The coordinator checks the member's key against the one
//! configured for that host before it shows its own; the member checks the coordinator's
//! against its `coordinators` list. Every frame after the handshake is encrypted and
//! authenticated, so nothing on the path can start or forge a rank.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::identity::{Identity, PublicKey, noise_params};

/// The largest Noise message; a frame must fit one.
const MAX_MESSAGE: usize = 65535;
/// What the cipher adds to each message.
const TAG_BYTES: usize = 16;
/// How long a handshake may take before the other end is taken for gone.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the cluster session failed: {0}")]
    Noise(#[from] snow::Error),
    #[error("the other end's key is {found}, not the {expected} configured for it")]
    WrongKey {
        expected: PublicKey,
        found: PublicKey,
    },
    #[error("the other end showed no key")]
    NoKey,
    #[error("a frame of {0} bytes is more than one cluster message holds")]
    TooLarge(usize),
    #[error("a frame did not decode: {0}")]
    Codec(#[from] corral_ipc::CodecError),
    #[error("the handshake took over {} s", HANDSHAKE_TIMEOUT.as_secs())]
    Timeout,
}

type Session = Arc<Mutex<snow::TransportState>>;

pub struct Channel {
    reader: ChannelReader,
    writer: ChannelWriter,
    peer: PublicKey,
}

pub struct ChannelReader {
    stream: OwnedReadHalf,
    session: Session,
}

pub struct ChannelWriter {
    stream: OwnedWriteHalf,
    session: Session,
}

impl Channel {
    /// The coordinator's end: a session with the host at `stream`, which must hold `expected`.
    pub async fn connect(
        stream: TcpStream,
        identity: &Identity,
        expected: PublicKey,
    ) -> Result<Self, ChannelError> {
        tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            Self::initiate(stream, identity, expected),
        )
        .await
        .map_err(|_| ChannelError::Timeout)?
    }

    async fn initiate(
        mut stream: TcpStream,
        identity: &Identity,
        expected: PublicKey,
    ) -> Result<Self, ChannelError> {
        let mut handshake = snow::Builder::new(noise_params()?)
            .local_private_key(identity.private())?
            .build_initiator()?;
        let mut buffer = vec![0u8; MAX_MESSAGE];
        let length = handshake.write_message(&[], &mut buffer)?;
        write_message(&mut stream, &buffer[..length]).await?;
        let message = read_message(&mut stream).await?;
        handshake.read_message(&message, &mut buffer)?;
        let found = remote_key(handshake.get_remote_static())?;
        if found != expected {
            return Err(ChannelError::WrongKey { expected, found });
        }
        let length = handshake.write_message(&[], &mut buffer)?;
        write_message(&mut stream, &buffer[..length]).await?;
        Ok(Self::new(stream, handshake.into_transport_mode()?, found))
    }

    /// The member's end: a session with whoever connected; the caller decides whether its key
    /// may start anything.
    pub async fn accept(stream: TcpStream, identity: &Identity) -> Result<Self, ChannelError> {
        tokio::time::timeout(HANDSHAKE_TIMEOUT, Self::respond(stream, identity))
            .await
            .map_err(|_| ChannelError::Timeout)?
    }

    async fn respond(mut stream: TcpStream, identity: &Identity) -> Result<Self, ChannelError> {
        let mut handshake = snow::Builder::new(noise_params()?)
            .local_private_key(identity.private())?
            .build_responder()?;
        let mut buffer = vec![0u8; MAX_MESSAGE];
        let message = read_message(&mut stream).await?;
        handshake.read_message(&message, &mut buffer)?;
        let length = handshake.write_message(&[], &mut buffer)?;
        write_message(&mut stream, &buffer[..length]).await?;
        let message = read_message(&mut stream).await?;
        handshake.read_message(&message, &mut buffer)?;
        let peer = remote_key(handshake.get_remote_static())?;
        Ok(Self::new(stream, handshake.into_transport_mode()?, peer))
    }

    fn new(stream: TcpStream, session: snow::TransportState, peer: PublicKey) -> Self {
        let session = Arc::new(Mutex::new(session));
        let (read, write) = stream.into_split();
        Self {
            reader: ChannelReader {
                stream: read,
                session: session.clone(),
            },
            writer: ChannelWriter {
                stream: write,
                session,
            },
            peer,
        }
    }

    /// The key the other end proved it holds.
    pub fn peer(&self) -> PublicKey {
        self.peer
    }

    pub async fn send<T: Serialize>(&mut self, message: &T) -> Result<(), ChannelError> {
        self.writer.send(message).await
    }

    pub async fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ChannelError> {
        self.reader.recv().await
    }

    pub fn split(self) -> (ChannelReader, ChannelWriter) {
        (self.reader, self.writer)
    }
}

impl ChannelWriter {
    pub async fn send<T: Serialize>(&mut self, message: &T) -> Result<(), ChannelError> {
        let plain = corral_ipc::encode_frame(message)?;
        if plain.len() + TAG_BYTES > MAX_MESSAGE {
            return Err(ChannelError::TooLarge(plain.len()));
        }
        let mut sealed = vec![0u8; plain.len() + TAG_BYTES];
        let length = lock(&self.session).write_message(&plain, &mut sealed)?;
        write_message(&mut self.stream, &sealed[..length]).await
    }
}

impl ChannelReader {
    /// The next frame; `None` once the other end has closed the connection.
    pub async fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ChannelError> {
        let sealed = match read_message(&mut self.stream).await {
            Ok(sealed) => sealed,
            Err(ChannelError::Io(error)) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Ok(None);
            }
            Err(error) => return Err(error),
        };
        let mut plain = vec![0u8; sealed.len()];
        let length = lock(&self.session).read_message(&sealed, &mut plain)?;
        match corral_ipc::decode_frame(&plain[..length])? {
            Some((message, _)) => Ok(Some(message)),
            None => Err(ChannelError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a cluster frame was cut short",
            ))),
        }
    }
}

fn lock(session: &Session) -> std::sync::MutexGuard<'_, snow::TransportState> {
    // A panic while holding the lock leaves the session's nonces as they were.
    session
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn remote_key(key: Option<&[u8]>) -> Result<PublicKey, ChannelError> {
    key.and_then(PublicKey::from_bytes)
        .ok_or(ChannelError::NoKey)
}

async fn write_message<W: AsyncWriteExt + Unpin>(
    stream: &mut W,
    message: &[u8],
) -> Result<(), ChannelError> {
    let length = u16::try_from(message.len()).map_err(|_| ChannelError::TooLarge(message.len()))?;
    stream.write_all(&length.to_be_bytes()).await?;
    stream.write_all(message).await?;
    stream.flush().await?;
    Ok(())
}

async fn read_message<R: AsyncReadExt + Unpin>(stream: &mut R) -> Result<Vec<u8>, ChannelError> {
    let mut length = [0u8; 2];
    stream.read_exact(&mut length).await?;
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(length))];
    stream.read_exact(&mut message).await?;
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    async fn pair(
        coordinator: &Identity,
        member: &Identity,
        expected: PublicKey,
    ) -> (Result<Channel, ChannelError>, Result<Channel, ChannelError>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepting = async {
            let (stream, _) = listener.accept().await.unwrap();
            Channel::accept(stream, member).await
        };
        let connecting = async {
            let stream = TcpStream::connect(address).await.unwrap();
            Channel::connect(stream, coordinator, expected).await
        };
        let (connected, accepted) = tokio::join!(connecting, accepting);
        (connected, accepted)
    }

    #[tokio::test]
    async fn both_ends_learn_each_others_key_and_frames_pass_both_ways() {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let coordinator = Identity::load_or_create(dirs[0].path()).unwrap();
        let member = Identity::load_or_create(dirs[1].path()).unwrap();
        let (connected, accepted) = pair(&coordinator, &member, member.public()).await;
        let (mut connected, mut accepted) = (connected.unwrap(), accepted.unwrap());
        assert_eq!(connected.peer(), member.public());
        assert_eq!(accepted.peer(), coordinator.public());
        connected.send(&("start", 3u32)).await.unwrap();
        let got: Option<(String, u32)> = accepted.recv().await.unwrap();
        assert_eq!(got, Some(("start".to_owned(), 3)));
        accepted.send(&"started").await.unwrap();
        let got: Option<String> = connected.recv().await.unwrap();
        assert_eq!(got.as_deref(), Some("started"));
        drop(connected);
        let got: Option<String> = accepted.recv().await.unwrap();
        assert_eq!(got, None, "a closed connection reads as the end");
    }

    #[tokio::test]
    async fn a_member_whose_key_is_not_the_configured_one_is_left_before_the_coordinator_shows_its_own()
     {
        let dirs = [
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        ];
        let coordinator = Identity::load_or_create(dirs[0].path()).unwrap();
        let member = Identity::load_or_create(dirs[1].path()).unwrap();
        let other = Identity::load_or_create(dirs[2].path()).unwrap();
        let (connected, accepted) = pair(&coordinator, &member, other.public()).await;
        assert!(
            matches!(connected, Err(ChannelError::WrongKey { found, .. }) if found == member.public())
        );
        assert!(
            accepted.is_err(),
            "the member never learns the coordinator's key"
        );
    }
}
