//! Launch failures that need no real worker: an unknown model, a missing binary, and a process
//! that exits before it connects (`/bin/sh` given `serve` as a script name it cannot open); and
//! the command line a worker gets.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

use super::super::run_dir::RunDir;
use super::super::spawn::{ModelArgs, ModelLookup, Spawner, naming};
use crate::pool::LaunchError;

fn launcher(
    binary: &str,
    state: &tempfile::TempDir,
) -> (Spawner, mpsc::UnboundedReceiver<super::Exited>) {
    let run_dir = RunDir::create(state.path()).unwrap();
    let lookup: ModelLookup = std::sync::Arc::new(|model| match model {
        "known" => Ok(PathBuf::from("/nowhere")),
        _ => Err(format!(
            "/models/{model}: tensor model.norm.weight is missing"
        )),
    });
    let (exits, exit_rx) = super::noted_exits();
    let launcher =
        Spawner::new(binary.into(), run_dir, lookup, exits).with_start_timeout(super::PATIENCE);
    (launcher, exit_rx)
}

#[tokio::test]
async fn a_model_the_registry_does_not_serve_is_not_spawned_and_is_unservable_with_its_reason() {
    let state = tempfile::tempdir().unwrap();
    let (launcher, _exits) = launcher("/bin/sh", &state);
    let err = launcher.launch("broken", u64::MAX).await.unwrap_err();
    let LaunchError::Unservable { model, reason } = err else {
        panic!("expected Unservable, got {err}");
    };
    assert_eq!(model, "broken");
    assert_eq!(
        reason,
        "/models/broken: tensor model.norm.weight is missing"
    );
    assert_eq!(
        std::fs::read_dir(state.path().join("run/workers"))
            .unwrap()
            .count(),
        0,
        "no worker was spawned"
    );
}

#[test]
fn a_load_failure_reason_always_names_the_models_path() {
    let dir = Path::new("/models/tiny");
    let named = "/models/tiny/model.safetensors: tensor x has shape [2], expected [3]";
    assert_eq!(naming(dir, named.to_owned()), named);
    assert_eq!(
        naming(dir, "cannot read config.json".to_owned()),
        "/models/tiny: cannot read config.json"
    );
}

#[tokio::test]
async fn a_missing_binary_fails_to_spawn_and_leaves_no_socket() {
    let state = tempfile::tempdir().unwrap();
    let (launcher, _exits) = launcher("/nonexistent/corral-worker", &state);
    let err = launcher.launch("known", u64::MAX).await.unwrap_err();
    assert!(matches!(err, LaunchError::Spawn { .. }), "{err}");
    let run = state.path().join("run");
    assert_eq!(
        std::fs::read_dir(&run).unwrap().count(),
        1,
        "only workers/ should remain"
    );
}

#[tokio::test]
async fn a_worker_that_exits_before_connecting_is_reported_and_its_record_removed() {
    let state = tempfile::tempdir().unwrap();
    let (launcher, mut exits) = launcher("/bin/sh", &state);
    let err = launcher.launch("known", u64::MAX).await.unwrap_err();
    let LaunchError::Exited { model, pid, .. } = err else {
        panic!("expected Exited, got {err}");
    };
    assert_eq!(model, "known");
    let exit = exits.recv().await.unwrap();
    assert_eq!((exit.model.as_str(), exit.pid), ("known", pid));

    let workers = state.path().join("run/workers");
    let emptied = tokio::time::timeout(super::PATIENCE, async {
        while std::fs::read_dir(&workers).unwrap().count() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(emptied.await.is_ok(), "the pid record was left behind");
}

#[tokio::test]
async fn a_workers_command_line_has_everyones_options_then_its_models_own() {
    let state = tempfile::tempdir().unwrap();
    let (launcher, _exits) = launcher("/bin/corral-worker", &state);
    let model_args: ModelArgs = std::sync::Arc::new(|model| match model {
        "solo" => vec!["--max-sequences".into(), "1".into()],
        _ => Vec::new(),
    });
    let launcher = launcher
        .with_worker_args(vec!["--prefill-chunk".into(), "512".into()])
        .with_model_args(model_args);
    let args = |model: &str| -> Vec<String> {
        let command = launcher.command(model, Path::new("/m"), Path::new("/s.sock"), 7);
        command
            .as_std()
            .get_args()
            .map(OsStr::to_string_lossy)
            .map(String::from)
            .collect()
    };
    let common = [
        "serve",
        "--model",
        "/m",
        "--socket",
        "/s.sock",
        "--memory-limit",
        "7",
        "--prefill-chunk",
        "512",
    ];
    assert_eq!(args("other"), common);
    assert_eq!(
        args("solo"),
        [&common[..], &["--max-sequences", "1"]].concat()
    );
}
