//! One repository in the Hugging Face cache, written the way huggingface_hub writes it, so that
//! its tools and corral share the files:
//!
//! ```text
//! models--ORG--NAME/blobs/<blob>                      the content, named by its sha256 or git id
//! models--ORG--NAME/blobs/<blob>.incomplete           a download in progress, resumed from its end
//! models--ORG--NAME/snapshots/<commit>/<file>         -> ../../blobs/<blob>
//! models--ORG--NAME/refs/<revision>                   the commit, once the snapshot is complete
//! .locks/models--ORG--NAME/<blob>.lock                flock held while <blob> downloads
//! ```
//!
//! A blob only gets its name after its size, and for LFS files its sha256, matched the hub's
//! listing; a download that fails either is deleted. Links are made after that, so nothing in
//! `snapshots/` ever points at a partial or corrupt file.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::hub::Hub;
use super::listing::RemoteFile;
use super::name::{RepoId, Revision};
use super::{PullError, PullEvent};

/// Progress is reported at about this fraction of a file, and at least this often in bytes.
const REPORTS_PER_FILE: u64 = 100;
const MAX_REPORT_STEP: u64 = 16 << 20;

pub(super) struct RepoCache {
    dir: PathBuf,
    locks: PathBuf,
}

impl RepoCache {
    pub fn new(cache: &Path, repo: &RepoId) -> Self {
        Self {
            dir: cache.join(repo.folder()),
            locks: cache.join(".locks").join(repo.folder()),
        }
    }

    pub fn snapshot(&self, commit: &str) -> PathBuf {
        self.dir.join("snapshots").join(commit)
    }

    /// Makes sure `file`'s blob is in the cache, downloading what is missing of it.
    pub async fn fetch(
        &self,
        hub: &Hub,
        repo: &RepoId,
        commit: &str,
        file: &RemoteFile,
        progress: &mut (dyn FnMut(PullEvent) + Send),
    ) -> Result<(), PullError> {
        let blobs = self.dir.join("blobs");
        let blob = blobs.join(&file.blob);
        if is_complete(&blob, file.size) {
            progress(PullEvent::Cached {
                file: file.name.clone(),
                total: file.size,
            });
            return Ok(());
        }
        for dir in [&blobs, &self.locks] {
            std::fs::create_dir_all(dir).map_err(PullError::io("creating", dir.as_path()))?;
        }
        let _lock = self.lock(repo, file)?;
        let partial = blobs.join(format!("{}.incomplete", file.blob));
        let download = Download {
            hub,
            repo,
            commit,
            file,
            partial: &partial,
        };
        if let Err(error) = download.run(progress).await {
            if matches!(
                error,
                PullError::ChecksumMismatch { .. } | PullError::SizeMismatch { .. }
            ) {
                // Resuming a file that is wrong would only make it wrong again.
                let _ = std::fs::remove_file(&partial);
            }
            return Err(error);
        }
        std::fs::rename(&partial, &blob).map_err(PullError::io("renaming", partial.as_path()))
    }

    /// `snapshots/<commit>/<file>` -> `../../blobs/<blob>`, replaced atomically.
    pub fn link(&self, commit: &str, file: &RemoteFile) -> Result<(), PullError> {
        let snapshot = self.snapshot(commit);
        let link = snapshot.join(&file.name);
        let target = Path::new("../../blobs").join(&file.blob);
        if std::fs::read_link(&link).is_ok_and(|existing| existing == target) {
            return Ok(());
        }
        std::fs::create_dir_all(&snapshot)
            .map_err(PullError::io("creating", snapshot.as_path()))?;
        let staged = snapshot.join(format!(".{}.{}.link", file.name, std::process::id()));
        let _ = std::fs::remove_file(&staged);
        std::os::unix::fs::symlink(&target, &staged)
            .map_err(PullError::io("linking", staged.as_path()))?;
        std::fs::rename(&staged, &link).map_err(PullError::io("linking", link.as_path()))
    }

    /// `refs/<revision>` names `commit` (a revision that is the commit itself needs no ref).
    pub fn write_ref(&self, revision: &Revision, commit: &str) -> Result<(), PullError> {
        if revision.as_str() == commit {
            return Ok(());
        }
        let path = self.dir.join("refs").join(revision.as_str());
        let Some(dir) = path.parent() else {
            return Ok(());
        };
        std::fs::create_dir_all(dir).map_err(PullError::io("creating", dir))?;
        let staged = dir.join(format!(".ref.{}", std::process::id()));
        std::fs::write(&staged, commit).map_err(PullError::io("writing", staged.as_path()))?;
        std::fs::rename(&staged, &path).map_err(PullError::io("writing", path.as_path()))
    }

    /// An exclusive flock on the blob's lock file, the one huggingface_hub's filelock takes, so
    /// two pulls (ours or theirs) never write one blob at once. A held lock is an error rather
    /// than a wait: the other pull may be a stalled one.
    fn lock(&self, repo: &RepoId, file: &RemoteFile) -> Result<File, PullError> {
        let path = self.locks.join(format!("{}.lock", file.blob));
        let lock = File::create(&path).map_err(PullError::io("creating", path.as_path()))?;
        match lock.try_lock() {
            Ok(()) => Ok(lock),
            Err(std::fs::TryLockError::WouldBlock) => Err(PullError::Busy {
                repo: repo.to_string(),
                file: file.name.clone(),
                lock: path,
            }),
            Err(std::fs::TryLockError::Error(source)) => Err(PullError::Io {
                action: "locking",
                path,
                source,
            }),
        }
    }
}

fn is_complete(blob: &Path, size: u64) -> bool {
    std::fs::metadata(blob).is_ok_and(|meta| meta.is_file() && meta.len() == size)
}

/// One file's download into its `.incomplete` file, from where an earlier one stopped.
struct Download<'a> {
    hub: &'a Hub,
    repo: &'a RepoId,
    commit: &'a str,
    file: &'a RemoteFile,
    partial: &'a Path,
}

impl Download<'_> {
    async fn run(&self, progress: &mut (dyn FnMut(PullEvent) + Send)) -> Result<(), PullError> {
        let (hasher, offset) = self.resume_point().await?;
        if offset > 0 && offset == self.file.size {
            // Stopped after its last byte, before its rename: there is nothing to ask for.
            self.verify(offset, hasher)?;
            Reporter::new(&self.file.name, self.file.size).now(offset, progress);
            return Ok(());
        }
        let (response, hasher, offset) = self.request(hasher, offset).await?;
        let mut out = self.open(offset > 0).await?;
        let received = self
            .receive(response, &mut out, hasher, offset, progress)
            .await;
        // Whatever arrived is kept for the next pull, also when the connection failed.
        self.flush(&mut out).await?;
        let (hasher, length) = received?;
        out.sync_all()
            .await
            .map_err(PullError::io("writing", self.partial))?;
        self.verify(length, hasher)
    }

    /// Asks for the file from `offset`; a hub that sends the whole file instead starts it over.
    async fn request(
        &self,
        hasher: Sha256,
        offset: u64,
    ) -> Result<(reqwest::Response, Sha256, u64), PullError> {
        let response = match self
            .hub
            .download(self.repo, self.commit, &self.file.name, offset)
            .await
        {
            Err(PullError::HubStatus { status: 416, .. }) => {
                // The hub does not know the range we asked for: our partial file is not a
                // prefix of its file. Start over next time.
                let _ = std::fs::remove_file(self.partial);
                let reason = "it refused to resume; the partial download was deleted";
                return Err(self.malformed(reason));
            }
            other => other?,
        };
        if offset == 0 {
            Ok((response, hasher, 0))
        } else if response.status() == reqwest::StatusCode::PARTIAL_CONTENT {
            self.check_range(&response, offset)?;
            Ok((response, hasher, offset))
        } else {
            Ok((response, Sha256::new(), 0))
        }
    }

    /// Appends the response's bytes to `out`, hashing them; the length reached and its hash.
    async fn receive(
        &self,
        mut response: reqwest::Response,
        out: &mut tokio::fs::File,
        mut hasher: Sha256,
        mut length: u64,
        progress: &mut (dyn FnMut(PullEvent) + Send),
    ) -> Result<(Sha256, u64), PullError> {
        let mut report = Reporter::new(&self.file.name, self.file.size);
        report.now(length, progress);
        // A body longer than the listing says stops here; `verify` refuses it.
        while length <= self.file.size {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(source) => {
                    return Err(PullError::Interrupted {
                        repo: self.repo.to_string(),
                        file: self.file.name.clone(),
                        bytes: length,
                        total: self.file.size,
                        source,
                    });
                }
            };
            out.write_all(&chunk)
                .await
                .map_err(PullError::io("writing", self.partial))?;
            hasher.update(&chunk);
            length += chunk.len() as u64;
            if length == self.file.size {
                report.now(length, progress);
            } else if length < self.file.size {
                report.maybe(length, progress);
            }
        }
        Ok((hasher, length))
    }

    /// The bytes already in the partial file, hashed (off the async threads: it may be
    /// gigabytes), and its length. A partial file longer than the blob is discarded.
    async fn resume_point(&self) -> Result<(Sha256, u64), PullError> {
        let partial = self.partial.to_path_buf();
        let size = self.file.size;
        let hashed = tokio::task::spawn_blocking(move || -> std::io::Result<(Sha256, u64)> {
            let mut hasher = Sha256::new();
            let mut input = match File::open(&partial) {
                Ok(input) => input,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    return Ok((hasher, 0));
                }
                Err(error) => return Err(error),
            };
            if input.metadata()?.len() > size {
                return Ok((hasher, 0));
            }
            let mut buffer = vec![0; 1 << 20];
            let mut length = 0;
            loop {
                let read = input.read(&mut buffer)?;
                if read == 0 {
                    return Ok((hasher, length));
                }
                hasher.update(&buffer[..read]);
                length += read as u64;
            }
        })
        .await;
        match hashed {
            Ok(result) => result.map_err(PullError::io("reading", self.partial)),
            Err(join) => {
                Err(self.malformed(&format!("hashing the partial download failed: {join}")))
            }
        }
    }

    /// A 206 must start where we asked (`Content-Range: bytes START-END/TOTAL`).
    fn check_range(&self, response: &reqwest::Response, offset: u64) -> Result<(), PullError> {
        let start = response
            .headers()
            .get(reqwest::header::CONTENT_RANGE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("bytes "))
            .and_then(|value| value.split('-').next())
            .and_then(|start| start.parse::<u64>().ok());
        if start == Some(offset) {
            Ok(())
        } else {
            Err(self.malformed(&format!(
                "it answered a range from {offset} with Content-Range {start:?}"
            )))
        }
    }

    async fn open(&self, append: bool) -> Result<tokio::fs::File, PullError> {
        tokio::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(self.partial)
            .await
            .map_err(PullError::io("opening", self.partial))
    }

    /// tokio writes in the background: what was received is on disk only after a flush.
    async fn flush(&self, out: &mut tokio::fs::File) -> Result<(), PullError> {
        out.flush()
            .await
            .map_err(PullError::io("writing", self.partial))
    }

    fn verify(&self, length: u64, hasher: Sha256) -> Result<(), PullError> {
        if length != self.file.size {
            return Err(PullError::SizeMismatch {
                repo: self.repo.to_string(),
                file: self.file.name.clone(),
                expected: self.file.size,
                actual: length,
            });
        }
        let actual = hex(&hasher.finalize());
        match &self.file.sha256 {
            Some(expected) if *expected != actual => Err(PullError::ChecksumMismatch {
                repo: self.repo.to_string(),
                file: self.file.name.clone(),
                expected: expected.clone(),
                actual,
            }),
            _ => Ok(()),
        }
    }

    fn malformed(&self, reason: &str) -> PullError {
        PullError::MalformedDownload {
            repo: self.repo.to_string(),
            file: self.file.name.clone(),
            reason: reason.to_owned(),
        }
    }
}

/// `Downloading` events for one file: at its start, every step of bytes, and at its end.
struct Reporter<'a> {
    file: &'a str,
    total: u64,
    step: u64,
    next: u64,
}

impl<'a> Reporter<'a> {
    fn new(file: &'a str, total: u64) -> Self {
        let step = (total / REPORTS_PER_FILE).clamp(1, MAX_REPORT_STEP);
        Self {
            file,
            total,
            step,
            next: 0,
        }
    }

    fn maybe(&mut self, bytes: u64, progress: &mut (dyn FnMut(PullEvent) + Send)) {
        if bytes >= self.next {
            self.now(bytes, progress);
        }
    }

    fn now(&mut self, bytes: u64, progress: &mut (dyn FnMut(PullEvent) + Send)) {
        self.next = bytes + self.step;
        progress(PullEvent::Downloading {
            file: self.file.to_owned(),
            bytes,
            total: self.total,
        });
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
