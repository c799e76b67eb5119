//! The registry the server reads, and scanning again: a pulled model, or one dropped into a
//! watched folder, becomes servable without a restart.
//!
//! Readers take a snapshot (`current`), so a request resolves its model against one consistent
//! registry. A rescan builds a whole new registry (discovery, then the worker's description)
//! and swaps it in; workers already running are untouched, and a model that disappeared from
//! disk is no longer offered to new requests. A model whose worker found its files cannot load
//! is swapped in as unservable too (`mark_unloadable`), and stays so across rescans until its
//! files change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use anyhow::{Context, Result};

use super::describe::describe;
use super::unloadable::{FilesStamp, LoadFailure};
use super::{ModelEntry, Registry, Source, Sources};

/// What the server serves when no model is found: `(id, path)`, made on first use.
pub type Fallback = Arc<dyn Fn() -> Result<(String, PathBuf)> + Send + Sync>;

/// Everything a scan needs, fixed at start-up.
pub struct Catalog {
    pub sources: Sources,
    /// Alias → model id, from the configuration.
    pub aliases: BTreeMap<String, String>,
    /// The `corral-worker` that describes the models.
    pub worker: PathBuf,
    pub fallback: Option<Fallback>,
}

impl Catalog {
    /// Finds every model, adds the fallback if there is none, asks the worker to describe them,
    /// and applies the aliases: Ollama's `name` for `name:latest` (as `ollama run` reads it),
    /// unless that name is taken, then the configured ones.
    pub async fn scan(&self) -> Result<Registry> {
        let sources = self.sources.clone();
        let fallback = self.fallback.clone();
        let mut registry = tokio::task::spawn_blocking(move || discover(&sources, fallback))
            .await
            .context("scanning for models")??;
        let paths: Vec<(PathBuf, Option<PathBuf>)> = registry
            .entries()
            .filter(|entry| entry.problem.is_none())
            .map(|entry| (entry.path.clone(), entry.projector.clone()))
            .collect();
        let mut described = describe(&self.worker, &paths).await;
        for entry in registry.models.values_mut() {
            entry.description = described.remove(&entry.path);
            if let (None, Some(reason)) = (&entry.problem, entry.unservable_reason()) {
                tracing::info!(model = %entry.id, path = %entry.path.display(), reason, "listed as unservable");
            }
        }
        let latest: Vec<(String, String)> = registry
            .entries()
            .filter(|entry| entry.source == Source::Ollama)
            .filter_map(|entry| {
                let name = entry.id.strip_suffix(":latest")?;
                Some((name.to_owned(), entry.id.clone()))
            })
            .collect();
        for (name, id) in latest {
            if registry.resolve(&name).is_none() {
                registry.aliases.insert(name, id);
            }
        }
        for (alias, target) in &self.aliases {
            registry.alias(alias, target);
        }
        Ok(registry)
    }
}

fn discover(sources: &Sources, fallback: Option<Fallback>) -> Result<Registry> {
    let mut registry = Registry::default();
    for entry in sources.scan() {
        registry.add(entry);
    }
    if registry.is_empty()
        && let Some(fallback) = fallback
    {
        let (id, path) = fallback()?;
        registry.add(ModelEntry::new(id, &path, Source::Default));
    }
    Ok(registry)
}

/// The current registry, shared by the API, the admin routes and the worker spawner.
pub struct SharedRegistry {
    catalog: Catalog,
    current: RwLock<Arc<Registry>>,
    /// One scan at a time, so the last one to finish saw the disk last.
    scanning: tokio::sync::Mutex<()>,
}

impl SharedRegistry {
    /// Scans once; the server starts with what it found.
    pub async fn new(catalog: Catalog) -> Result<Self> {
        let registry = catalog.scan().await?;
        Ok(SharedRegistry {
            catalog,
            current: RwLock::new(Arc::new(registry)),
            scanning: tokio::sync::Mutex::new(()),
        })
    }

    /// The registry as of now.
    pub fn current(&self) -> Arc<Registry> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Scans every source again and describes what it finds, then serves from the result. On an
    /// error the registry stays as it was. The default model, once served, stays until restart:
    /// its worker may be running, and the first pull would otherwise hide it. A model its worker
    /// could not load stays unservable while its files are as they were then; changed files
    /// get another try. (A load failure marked while this scan ran is not carried over: the
    /// model's next start finds it again.)
    pub async fn rescan(&self) -> Result<Arc<Registry>> {
        let _one_at_a_time = self.scanning.lock().await;
        let mut registry = self.catalog.scan().await?;
        let previous = self.current();
        if let Some(default) = previous
            .entries()
            .find(|entry| entry.source == Source::Default)
        {
            registry.add(default.clone());
        }
        for entry in registry.models.values_mut() {
            if let Some(before) = previous.get(&entry.id)
                && let Some(failure) = &before.load_failure
                && before.path == entry.path
                && failure.files == FilesStamp::of(&entry.path)
            {
                entry.load_failure = Some(failure.clone());
            }
        }
        let registry = Arc::new(registry);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = registry.clone();
        tracing::info!(models = registry.models.len(), "models scanned again");
        Ok(registry)
    }

    /// Lists `model` as unservable for `reason` (naming the file), its worker having found that
    /// the files at `path` can never load. A model that a rescan has since replaced by other
    /// files is left alone.
    pub fn mark_unloadable(&self, model: &str, path: &Path, reason: &str) {
        let files = FilesStamp::of(path);
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if current.get(model).is_none_or(|entry| entry.path != path) {
            return;
        }
        let mut registry = Registry::clone(&current);
        if let Some(entry) = registry.models.get_mut(model) {
            entry.load_failure = Some(LoadFailure {
                reason: reason.to_owned(),
                files,
            });
        }
        *current = Arc::new(registry);
        tracing::info!(model, path = %path.display(), reason, "listed as unservable: its files cannot load");
    }
}
