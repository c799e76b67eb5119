//! Why a block file is not served. Each names the file; a load that hits one deletes the file.

use std::io;
use std::path::PathBuf;

use super::header::HeaderFault;

#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: bad header: {fault}", path.display())]
    Header {
        path: PathBuf,
        #[source]
        fault: HeaderFault,
    },
    #[error("{}: {field} does not match", path.display())]
    Mismatch { path: PathBuf, field: &'static str },
    #[error("{}: header says {expected} payload bytes, file holds {actual}", path.display())]
    Length {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    #[error("{}: payload checksum does not match", path.display())]
    Checksum { path: PathBuf },
}
