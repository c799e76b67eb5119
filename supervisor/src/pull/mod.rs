//! `corral pull` and `POST /admin/models/pull`: a model from the Hugging Face hub into the
//! Hugging Face cache, where corral's registry and every other tool of that ecosystem find it.
//!
//! A pull is planned, then downloaded. The plan (`plan`) reads the repository's listing at the
//! revision (`/api/models/{repo}/revision/{rev}?blobs=true`: the commit, each file's size and,
//! for LFS files, sha256), chooses the files a model needs (`listing.rs`), and checks with one
//! HEAD that the hub will serve them (a gated model lists its files to anyone). Everything that
//! can be refused is refused there, before a byte is written, so the admin route answers those
//! as plain errors. The download (`Plan::download`) then fetches each file into its blob
//! (`cache.rs`), resuming an interrupted one with a Range request and checking sizes and
//! sha256 before a blob is named and linked, and finally points `refs/<revision>` at the commit.
//!
//! Why not the `hf-hub` crate, as a first choice would be: read at its versions 0.4.3 and
//! 1.0.0, it does not do three things a pull must. 1.0.0 truncates a partial download and
//! starts over (no Range), 0.4.3 resumes only at 10 MB chunk boundaries in its own `.sync.part`
//! format that huggingface_hub's `.incomplete` files are not; neither checks a downloaded
//! file's sha256 against the hub's, so a corrupt blob would be linked into the snapshot before
//! we could look at it; 0.4.3 ignores `HF_TOKEN` and `HF_HUB_CACHE` and panics without a home
//! directory. 1.0.0 also brings reqwest 0.13 beside our 0.12 and the hf-xet stack. What it did
//! for us, three requests and the cache layout, is a few hundred lines here on the reqwest
//! client corral already uses.

mod cache;
mod error;
mod hub;
mod listing;
mod name;

use std::path::PathBuf;

use serde::Serialize;

pub use error::PullError;
pub use hub::Hub;
pub use name::{ModelRef, RepoId, Revision};

use cache::RepoCache;
use listing::RemoteFile;

/// What a pull reports as it goes; also the lines of the admin route's response stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum PullEvent {
    /// The revision resolved to `commit`; these files, `bytes` together, will be in the snapshot.
    Resolved {
        model: String,
        revision: String,
        commit: String,
        files: Vec<String>,
        bytes: u64,
    },
    /// `bytes` of `file` are on disk (a resumed download starts above 0).
    Downloading {
        file: String,
        bytes: u64,
        total: u64,
    },
    /// `file` was already in the cache.
    Cached { file: String, total: u64 },
}

/// A pull that the hub has agreed to: the commit and the files to fetch.
pub struct Plan {
    hub: Hub,
    repo: RepoId,
    revision: Revision,
    commit: String,
    files: Vec<RemoteFile>,
}

/// Where a finished pull put the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pulled {
    /// The id corral serves it under (`ORG/NAME`).
    pub model: String,
    pub commit: String,
    /// `snapshots/<commit>`, where the files are linked.
    pub snapshot: PathBuf,
    /// The snapshot, or the `.gguf` file in it for a GGUF model.
    pub path: PathBuf,
}

/// Resolves `model` on the hub and chooses its files (`file` picks a `.gguf`).
pub async fn plan(hub: &Hub, model: &ModelRef, file: Option<&str>) -> Result<Plan, PullError> {
    let revision = model.revision.clone().unwrap_or_else(Revision::main);
    let listing = hub.listing(&model.repo, &revision).await?;
    let files = listing::select(&model.repo, &listing, file)?;
    if let Some(first) = files.first() {
        hub.check_access(&model.repo, &listing.sha, &first.name)
            .await?;
    }
    Ok(Plan {
        hub: hub.clone(),
        repo: model.repo.clone(),
        revision,
        commit: listing.sha,
        files,
    })
}

impl Plan {
    /// Fetches every file not yet in the cache, links the snapshot and writes the ref.
    pub async fn download(
        self,
        progress: &mut (dyn FnMut(PullEvent) + Send),
    ) -> Result<Pulled, PullError> {
        progress(PullEvent::Resolved {
            model: self.repo.to_string(),
            revision: self.revision.to_string(),
            commit: self.commit.clone(),
            files: self.files.iter().map(|file| file.name.clone()).collect(),
            bytes: self.files.iter().map(|file| file.size).sum(),
        });
        let cache = RepoCache::new(self.hub.cache(), &self.repo);
        for file in &self.files {
            cache
                .fetch(&self.hub, &self.repo, &self.commit, file, progress)
                .await?;
            cache.link(&self.commit, file)?;
        }
        cache.write_ref(&self.revision, &self.commit)?;
        let snapshot = cache.snapshot(&self.commit);
        let path = match self.files.as_slice() {
            [gguf] if gguf.name.ends_with(".gguf") => snapshot.join(&gguf.name),
            _ => snapshot.clone(),
        };
        Ok(Pulled {
            model: self.repo.to_string(),
            commit: self.commit,
            snapshot,
            path,
        })
    }
}
