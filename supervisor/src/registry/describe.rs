//! Asking the worker what the found models are: `corral-worker describe PATH...` prints one
//! JSON [`ModelDescription`] per path, one a line. Model formats live in the worker, so it alone
//! says what a file holds and whether it can be served; the supervisor only found the files.
//!
//! A describe that fails, hangs or prints something else is a warning: the models keep no
//! description and count as servable, as before the worker could describe them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use corral_ipc::ModelDescription;
use tokio::process::Command;

/// Reading GGUF headers and `config.json`s is quick; this only guards against a hung worker.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(120);
/// Paths per run, well under any system's argument length limit.
const PATHS_PER_RUN: usize = 256;

/// Each described path's description, keyed by the path as given; a path with a vision
/// projector beside it (a GGUF's `mmproj`) is described with it, in a run of its own.
pub(super) async fn describe(
    worker: &Path,
    paths: &[(PathBuf, Option<PathBuf>)],
) -> HashMap<PathBuf, ModelDescription> {
    let mut described = HashMap::new();
    let alone: Vec<PathBuf> = paths
        .iter()
        .filter(|(_, projector)| projector.is_none())
        .map(|(path, _)| path.clone())
        .collect();
    let runs =
        alone
            .chunks(PATHS_PER_RUN)
            .map(|chunk| (chunk.to_vec(), None))
            .chain(paths.iter().filter_map(|(path, projector)| {
                Some((vec![path.clone()], Some(projector.clone()?)))
            }));
    for (chunk, projector) in runs {
        match run(worker, &chunk, projector.as_deref()).await {
            Ok(stdout) => described.extend(parse(&stdout, &chunk, worker)),
            Err(error) => {
                tracing::warn!(worker = %worker.display(), %error, "cannot describe the models; listing them without format, size or servability");
            }
        }
    }
    described
}

/// The worker's stdout, if it ran to a successful exit within the timeout.
async fn run(worker: &Path, paths: &[PathBuf], projector: Option<&Path>) -> Result<String, String> {
    let mut command = Command::new(worker);
    command.arg("describe");
    if let Some(projector) = projector {
        command.arg("--mmproj").arg(projector);
    }
    let child = command
        .args(paths)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| format!("cannot run `{} describe`: {error}", worker.display()))?;
    let output = tokio::time::timeout(DESCRIBE_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| format!("`describe` did not finish within {DESCRIBE_TIMEOUT:?}"))?
        .map_err(|error| format!("waiting for `describe`: {error}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "`describe` ended with {}: {}",
            output.status,
            stderr.trim()
        ));
    }
    String::from_utf8(output.stdout).map_err(|_| "`describe` printed invalid UTF-8".to_owned())
}

/// The descriptions in `stdout` of the paths asked about; a line that does not parse, or
/// describes a path nobody asked about, is a warning.
fn parse(stdout: &str, asked: &[PathBuf], worker: &Path) -> HashMap<PathBuf, ModelDescription> {
    let mut described = HashMap::new();
    for line in stdout.lines().filter(|line| !line.trim().is_empty()) {
        match serde_json::from_str::<ModelDescription>(line) {
            Ok(description) if asked.contains(&description.path) => {
                for warning in &description.warnings {
                    tracing::warn!(path = %description.path.display(), "{warning}");
                }
                described.insert(description.path.clone(), description);
            }
            Ok(description) => {
                tracing::warn!(worker = %worker.display(), path = %description.path.display(), "`describe` answered for a path it was not given");
            }
            Err(error) => {
                tracing::warn!(worker = %worker.display(), %error, line, "`describe` printed a line that is no model description");
            }
        }
    }
    for path in asked.iter().filter(|path| !described.contains_key(*path)) {
        tracing::warn!(worker = %worker.display(), path = %path.display(), "`describe` said nothing about a model");
    }
    described
}

#[cfg(test)]
mod tests {
    use corral_ipc::ModelFormat;

    use super::*;

    fn description(path: &str, unservable: Option<&str>) -> ModelDescription {
        ModelDescription {
            path: PathBuf::from(path),
            format: ModelFormat::Gguf,
            architecture: Some("llama".to_owned()),
            quantization: Some("Q4_1".to_owned()),
            size_bytes: 98_000_000,
            parameters: None,
            active_parameters: None,
            gguf_loaded_bytes: Default::default(),
            cache: None,
            unservable: unservable.map(str::to_owned),
            kind: corral_ipc::ModelKind::Chat,
            vision: false,
            vision_reserve_bytes: 0,
            gguf_sampling: Default::default(),
            generation_config: Default::default(),
            warnings: Vec::new(),
            mtp: corral_ipc::MtpLayers::None,
        }
    }

    #[test]
    fn one_json_line_per_path_is_matched_to_its_path() {
        let a = description("/m/a.gguf", None);
        let b = description("/m/b", Some("unknown architecture `mamba`"));
        let stdout = format!(
            "{}\n{}\n",
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        let asked = [a.path.clone(), b.path.clone()];
        let described = parse(&stdout, &asked, Path::new("corral-worker"));
        assert_eq!(described[&a.path], a);
        assert_eq!(described[&b.path], b);
    }

    #[test]
    fn garbage_lines_and_unasked_paths_are_skipped() {
        let a = description("/m/a.gguf", None);
        let stranger = description("/elsewhere", None);
        let stdout = format!(
            "not json\n{}\n{{\"path\": 3}}\n{}\n",
            serde_json::to_string(&stranger).unwrap(),
            serde_json::to_string(&a).unwrap()
        );
        let asked = [a.path.clone(), PathBuf::from("/m/silent")];
        let described = parse(&stdout, &asked, Path::new("corral-worker"));
        assert_eq!(described.len(), 1);
        assert_eq!(described[&a.path], a);
    }

    #[tokio::test]
    async fn a_worker_without_describe_leaves_the_models_undescribed() {
        // `false` exits 1 whatever its arguments: a worker that cannot describe.
        let described = describe(Path::new("false"), &[(PathBuf::from("/m/a"), None)]).await;
        assert!(described.is_empty());
        let missing = describe(
            Path::new("/nonexistent/corral-worker"),
            &[(PathBuf::from("/m/a"), None)],
        )
        .await;
        assert!(missing.is_empty());
    }

    #[tokio::test]
    async fn the_worker_is_given_every_path_after_describe() {
        // A script stands in for the worker, answering only when called as the contract says.
        let dir = tempfile::tempdir().unwrap();
        let worker = dir.path().join("worker");
        let a = description("/m/a.gguf", None);
        std::fs::write(
            &worker,
            format!(
                "#!/bin/sh\n[ \"$1\" = describe ] && [ \"$2\" = /m/a.gguf ] && echo '{}'\n",
                serde_json::to_string(&a).unwrap()
            ),
        )
        .unwrap();
        make_executable(&worker);
        let described = describe(&worker, &[(a.path.clone(), None)]).await;
        assert_eq!(described.get(&a.path), Some(&a));
    }

    #[tokio::test]
    async fn a_gguf_with_a_projector_is_described_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let worker = dir.path().join("worker");
        let a = description("/m/a.gguf", None);
        std::fs::write(
            &worker,
            format!(
                "#!/bin/sh
[ \"$1\" = describe ] && [ \"$2\" = --mmproj ] && [ \"$3\" = /m/mmproj.gguf ] && [ \"$4\" = /m/a.gguf ] && echo '{}'\n",
                serde_json::to_string(&a).unwrap()
            ),
        )
        .unwrap();
        make_executable(&worker);
        let projector = Some(PathBuf::from("/m/mmproj.gguf"));
        let described = describe(&worker, &[(a.path.clone(), projector)]).await;
        assert_eq!(described.get(&a.path), Some(&a));
    }

    fn make_executable(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
