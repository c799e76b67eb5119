//! Everything a pull can fail with, each naming the repository, file or path it is about and,
//! where the user can do something, what.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(
        "`{0}` is not a model id: expected ORG/NAME[@REVISION], each part letters, digits, `.`, `_` \
         or `-` (starting and ending with a letter or digit, without `--` or `..`)"
    )]
    InvalidName(String),
    #[error("`{0}` is not a revision: expected a branch, tag or commit such as `main`")]
    InvalidRevision(String),
    #[error("`{0}` is not a .gguf file name at the top of the repository (--file takes one)")]
    NotAGgufFile(String),
    #[error("{repo} has no file {file}; its GGUF files: {ggufs}")]
    FileNotInRepo {
        repo: String,
        file: String,
        ggufs: String,
    },
    #[error("{repo} holds several GGUF files; choose one with --file: {ggufs}")]
    SeveralGgufs { repo: String, ggufs: String },
    #[error(
        "{repo} has no weights corral can serve (safetensors with a config.json, or a .gguf); \
         it holds: {holds}"
    )]
    NoUsableWeights { repo: String, holds: String },
    #[error(
        "{repo} is gated or private and needs a token ({url} answered {status}): set HF_TOKEN to \
         an access token of an account that has accepted the model's licence on {page}"
    )]
    Unauthorized {
        repo: String,
        url: String,
        status: u16,
        page: String,
    },
    #[error("{what} not found on the hub ({url} answered 404{detail})")]
    NotFound {
        what: String,
        url: String,
        detail: String,
    },
    #[error("the hub answered {status} to {url}{detail}")]
    HubStatus {
        url: String,
        status: u16,
        detail: String,
    },
    #[error("cannot set up the HTTP client for the hub")]
    Client(#[source] reqwest::Error),
    #[error("cannot reach the hub at {url}")]
    Request {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "the download of {file} from {repo} was interrupted after {bytes} of {total} bytes; \
         run the pull again to resume it"
    )]
    Interrupted {
        repo: String,
        file: String,
        bytes: u64,
        total: u64,
        #[source]
        source: reqwest::Error,
    },
    #[error("the hub's listing of {repo} is not usable: {reason}")]
    MalformedListing { repo: String, reason: String },
    #[error("the hub's answer for {file} of {repo} is not usable: {reason}")]
    MalformedDownload {
        repo: String,
        file: String,
        reason: String,
    },
    #[error(
        "{file} of {repo} is corrupt: its sha256 is {actual}, the hub lists {expected}; the \
         download was deleted, nothing links to it"
    )]
    ChecksumMismatch {
        repo: String,
        file: String,
        expected: String,
        actual: String,
    },
    #[error(
        "{file} of {repo} has {actual} bytes, the hub lists {expected}; the download was deleted"
    )]
    SizeMismatch {
        repo: String,
        file: String,
        expected: u64,
        actual: u64,
    },
    #[error("another pull is downloading {file} of {repo} (it holds {lock}); try again after it")]
    Busy {
        repo: String,
        file: String,
        lock: PathBuf,
    },
    #[error("{action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "no Hugging Face cache directory: set HF_HOME or HF_HUB_CACHE, or pass --hf-home (no home \
         directory to default to)"
    )]
    NoCacheDir,
}

impl PullError {
    pub(super) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| PullError::Io {
            action,
            path,
            source,
        }
    }
}
