//! Starting and stopping models on an operator's request: `POST /admin/workers/{model}/kill`,
//! `POST /admin/workers/{model}/pin` (`{"pinned": bool}`),
//! `POST /v1/models/{model}/load` and `/unload` (the routes oMLX clients call), and
//! `GET /v1/models/status`. Hugging Face ids hold a slash, so each route also takes the id as two
//! segments (`org/name`); either way the name is only looked up in the registry.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use corral_ipc::{ModelFormat, ModelKind, SpeculativeMethod};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use super::Admin;
use super::error::AdminError;
use crate::memory::format_bytes;
use crate::pool::{Phase, StopReason};
use crate::process::{RankStopped, StopRecord};
use crate::registry::Source;
use crate::sampling_defaults::SamplingDefaults;

#[derive(Debug, Default, Deserialize)]
pub struct KillParams {
    /// A signal name (`SIGTERM`, `TERM`); SIGKILL when absent.
    signal: Option<String>,
    /// Let the requests in flight finish, then stop gracefully, instead of signalling now.
    #[serde(default)]
    drain: bool,
}

#[derive(Debug, Serialize)]
pub struct Stopped {
    pub model: String,
    pub pid: u32,
    /// `graceful`, `terminated` or `killed`.
    pub step: String,
    pub freed_bytes: u64,
    pub duration_ms: f64,
    /// A group's other ranks, each as it ended on its host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<StoppedRank>,
}

/// A rank of a stopped group: what it held, and whether its end is known.
#[derive(Debug, Serialize)]
pub struct StoppedRank {
    pub rank: usize,
    pub host: String,
    pub pid: u32,
    pub freed_bytes: u64,
    /// Its exit status, or how it was lost; `null` while its end was not told.
    pub status: Option<String>,
    /// Whether it is known reaped, here or by its host's word.
    pub confirmed: bool,
}

impl From<RankStopped> for StoppedRank {
    fn from(rank: RankStopped) -> Self {
        StoppedRank {
            rank: rank.rank,
            host: rank.host,
            pid: rank.pid,
            freed_bytes: rank.freed_bytes,
            confirmed: rank.end.as_ref().is_some_and(|end| end.confirmed),
            status: rank.end.map(|end| end.status),
        }
    }
}

impl From<StopRecord> for Stopped {
    fn from(record: StopRecord) -> Self {
        Stopped {
            model: record.model,
            pid: record.pid,
            step: format!("{:?}", record.step).to_lowercase(),
            freed_bytes: record.freed_bytes,
            duration_ms: record.duration.as_secs_f64() * 1e3,
            ranks: record.ranks.into_iter().map(StoppedRank::from).collect(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Loaded {
    pub model: String,
    pub status: &'static str,
    pub pid: Option<u32>,
}

pub async fn kill(
    State(admin): State<Arc<Admin>>,
    Path(model): Path<String>,
    Query(params): Query<KillParams>,
) -> Result<Json<Stopped>, AdminError> {
    kill_model(&admin, &model, params).await
}

pub async fn kill_scoped(
    State(admin): State<Arc<Admin>>,
    Path((org, name)): Path<(String, String)>,
    Query(params): Query<KillParams>,
) -> Result<Json<Stopped>, AdminError> {
    kill_model(&admin, &format!("{org}/{name}"), params).await
}

async fn kill_model(
    admin: &Admin,
    name: &str,
    params: KillParams,
) -> Result<Json<Stopped>, AdminError> {
    let model = admin.resolve(name)?;
    let record = if params.drain {
        admin
            .pool
            .unload(&model, StopReason::Killed, admin.config.drain_timeout)
            .await?
    } else {
        let signal = match params.signal.as_deref() {
            None => Signal::SIGKILL,
            Some(name) => parse_signal(name)?,
        };
        admin.pool.kill(&model, signal).await?
    };
    Ok(Json(record.into()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinBody {
    pinned: bool,
}

#[derive(Debug, Serialize)]
pub struct Pinned {
    pub model: String,
    pub pinned: bool,
}

pub async fn pin(
    State(admin): State<Arc<Admin>>,
    Path(model): Path<String>,
    body: Result<Json<PinBody>, JsonRejection>,
) -> Result<Json<Pinned>, AdminError> {
    pin_model(&admin, &model, body)
}

pub async fn pin_scoped(
    State(admin): State<Arc<Admin>>,
    Path((org, name)): Path<(String, String)>,
    body: Result<Json<PinBody>, JsonRejection>,
) -> Result<Json<Pinned>, AdminError> {
    pin_model(&admin, &format!("{org}/{name}"), body)
}

/// A pinned worker is never stopped for being idle or to make room; pinning does not start it.
fn pin_model(
    admin: &Admin,
    name: &str,
    body: Result<Json<PinBody>, JsonRejection>,
) -> Result<Json<Pinned>, AdminError> {
    let Json(body) = body.map_err(|rejection| AdminError::InvalidBody(rejection.body_text()))?;
    let model = admin.resolve(name)?;
    admin.pool.set_pinned(&model, body.pinned);
    tracing::info!(model, pinned = body.pinned, "pinned by an operator");
    Ok(Json(Pinned {
        model,
        pinned: body.pinned,
    }))
}

pub async fn load(
    State(admin): State<Arc<Admin>>,
    Path(model): Path<String>,
) -> Result<Json<Loaded>, AdminError> {
    load_model(&admin, &model).await
}

pub async fn load_scoped(
    State(admin): State<Arc<Admin>>,
    Path((org, name)): Path<(String, String)>,
) -> Result<Json<Loaded>, AdminError> {
    load_model(&admin, &format!("{org}/{name}")).await
}

/// Starts the model's worker (through admission, like a request) and waits until it is ready.
async fn load_model(admin: &Admin, name: &str) -> Result<Json<Loaded>, AdminError> {
    let model = admin.resolve(name)?;
    if let Some(reason) = admin
        .registry
        .current()
        .get(&model)
        .and_then(|entry| entry.unservable_reason())
    {
        return Err(AdminError::Unservable {
            model,
            reason: reason.to_owned(),
        });
    }
    let lease = admin
        .pool
        .acquire(&model, admin.config.memory.admission_wait)
        .await?;
    Ok(Json(Loaded {
        status: "loaded",
        pid: Some(lease.pid()),
        model,
    }))
}

pub async fn unload(
    State(admin): State<Arc<Admin>>,
    Path(model): Path<String>,
) -> Result<Json<Stopped>, AdminError> {
    unload_model(&admin, &model).await
}

pub async fn unload_scoped(
    State(admin): State<Arc<Admin>>,
    Path((org, name)): Path<(String, String)>,
) -> Result<Json<Stopped>, AdminError> {
    unload_model(&admin, &format!("{org}/{name}")).await
}

/// Lets the requests in flight finish (up to the drain timeout), then stops the worker.
async fn unload_model(admin: &Admin, name: &str) -> Result<Json<Stopped>, AdminError> {
    let model = admin.resolve(name)?;
    let record = admin
        .pool
        .unload(&model, StopReason::Unload, admin.config.drain_timeout)
        .await?;
    Ok(Json(record.into()))
}

#[derive(Debug, Serialize)]
pub struct ModelsStatus {
    pub object: &'static str,
    pub data: Vec<ModelStatus>,
    pub memory: MemorySummary,
}

#[derive(Debug, Serialize)]
pub struct ModelStatus {
    pub id: String,
    /// `chat`, `embedding` or `rerank`: which endpoints answer it.
    pub kind: ModelKind,
    /// Where it was found: `model-flag`, `models-dir`, `huggingface`, `lmstudio`, `ollama` or
    /// `default`.
    pub source: Source,
    /// The model directory or GGUF file.
    pub path: PathBuf,
    /// `safetensors` or `gguf`; absent when the worker did not describe the model.
    pub format: Option<ModelFormat>,
    pub architecture: Option<String>,
    pub quantization: Option<String>,
    /// Bytes of the weight files.
    pub size_bytes: Option<u64>,
    /// Parameters of the model served, counted from its weights' shapes.
    pub parameters: Option<u64>,
    /// For a mixture of experts, the parameters one token runs through.
    pub active_parameters: Option<u64>,
    /// Whether the checkpoint kept the multi-token-prediction layers its config names (`none`,
    /// `kept`, or `dropped` by a conversion): what `speculative = "mtp"` needs.
    pub mtp: Option<corral_ipc::MtpLayers>,
    /// Why it cannot be served; such a model is not in `GET /v1/models`.
    pub unservable: Option<String>,
    pub loaded: bool,
    pub state: &'static str,
    pub pid: Option<u32>,
    pub pinned: bool,
    pub memory_bytes: Option<u64>,
    /// What a request that leaves a sampling field out gets, and where each value came from.
    pub sampling_defaults: SamplingDefaults,
    /// The positions a sequence may hold, as its ready worker said.
    pub context_length: Option<u32>,
    /// `[models.ID] speculative`, and the draft model; absent: the worker's choice.
    pub speculative: Option<SpeculativeMethod>,
    pub draft: Option<String>,
    /// Seconds idle before its worker is stopped; absent: never.
    pub idle_timeout_secs: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct MemorySummary {
    pub ceiling_bytes: u64,
    pub used_bytes: u64,
    pub ceiling: String,
    pub used: String,
}

pub async fn status(State(admin): State<Arc<Admin>>) -> Json<ModelsStatus> {
    let snapshots = admin.pool.snapshot();
    let usage = admin.pool.usage();
    let data = admin
        .registry
        .current()
        .entries()
        .map(|entry| {
            let snapshot = snapshots.iter().find(|snapshot| snapshot.model == entry.id);
            let phase = snapshot.map_or(Phase::NotRunning, |snapshot| snapshot.phase);
            let description = entry.description.as_ref();
            let settings = admin.config.models.get(&entry.id);
            ModelStatus {
                id: entry.id.clone(),
                kind: entry.kind(),
                source: entry.source,
                path: entry.path.clone(),
                format: description.map(|description| description.format),
                architecture: description.and_then(|description| description.architecture.clone()),
                quantization: description.and_then(|description| description.quantization.clone()),
                size_bytes: description.map(|description| description.size_bytes),
                parameters: description.and_then(|description| description.parameters),
                active_parameters: description
                    .and_then(|description| description.active_parameters),
                mtp: description.map(|description| description.mtp),
                unservable: entry.unservable_reason().map(str::to_owned),
                loaded: phase == Phase::Ready,
                state: phase.name(),
                pid: snapshot.and_then(|snapshot| snapshot.pid),
                pinned: snapshot.is_some_and(|snapshot| snapshot.pinned),
                memory_bytes: usage
                    .iter()
                    .find(|worker| worker.model == entry.id)
                    .map(|worker| worker.bytes),
                sampling_defaults: SamplingDefaults::for_model(settings, entry),
                context_length: admin
                    .pool
                    .ready_worker(&entry.id)
                    .and_then(|worker| worker.handle.context_length()),
                speculative: settings.and_then(|settings| settings.speculative),
                draft: settings.and_then(|settings| settings.draft.clone()),
                idle_timeout_secs: admin
                    .config
                    .idle_timeout(&entry.id)
                    .map(|timeout| timeout.as_secs()),
            }
        })
        .collect();
    let ceiling = admin.pool.limits().budget.ceiling;
    let used = usage.iter().map(|worker| worker.bytes).sum();
    Json(ModelsStatus {
        object: "list",
        data,
        memory: MemorySummary {
            ceiling_bytes: ceiling,
            used_bytes: used,
            ceiling: format_bytes(ceiling),
            used: format_bytes(used),
        },
    })
}

/// `SIGTERM`, `TERM` or `sigterm`; only signals that end or poke a process.
fn parse_signal(name: &str) -> Result<Signal, AdminError> {
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    match full.as_str() {
        "SIGKILL" => Ok(Signal::SIGKILL),
        "SIGTERM" => Ok(Signal::SIGTERM),
        "SIGINT" => Ok(Signal::SIGINT),
        "SIGHUP" => Ok(Signal::SIGHUP),
        "SIGQUIT" => Ok(Signal::SIGQUIT),
        "SIGUSR1" => Ok(Signal::SIGUSR1),
        "SIGUSR2" => Ok(Signal::SIGUSR2),
        _ => Err(AdminError::UnknownSignal(name.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named_with_or_without_the_prefix_in_any_case() {
        assert_eq!(parse_signal("SIGTERM").unwrap(), Signal::SIGTERM);
        assert_eq!(parse_signal("term").unwrap(), Signal::SIGTERM);
        assert_eq!(parse_signal("Kill").unwrap(), Signal::SIGKILL);
        assert!(matches!(
            parse_signal("SIGSTOP"),
            Err(AdminError::UnknownSignal(_))
        ));
    }
}
