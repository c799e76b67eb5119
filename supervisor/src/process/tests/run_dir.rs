//! The run directory's permissions, slot names and orphan handling, with a real `sleep`
//! process standing in for a worker left over from a killed supervisor.

use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use super::super::run_dir::{RunDir, RunDirError, SlotName, reap_orphans};

fn mode(path: &std::path::Path) -> u32 {
    fs::metadata(path)
        .map(|meta| meta.permissions().mode() & 0o777)
        .unwrap()
}

#[test]
fn run_dir_is_created_private_and_tightened_when_loose() {
    let state = tempfile::tempdir().unwrap();
    let run = RunDir::create(state.path()).unwrap();
    assert_eq!(run.path(), state.path().join("run"));
    assert_eq!(mode(run.path()), 0o700);

    fs::set_permissions(run.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let run = RunDir::create(state.path()).unwrap();
    assert_eq!(mode(run.path()), 0o700);
}

#[test]
fn run_dir_refuses_a_symlink_in_its_place() {
    let state = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), state.path().join("run")).unwrap();
    let err = RunDir::create(state.path()).unwrap_err();
    assert!(matches!(err, RunDirError::NotADirectory { .. }), "{err}");
}

#[tokio::test]
async fn bound_socket_is_0600_and_replaces_a_stale_one() {
    let state = tempfile::tempdir().unwrap();
    let run = RunDir::create(state.path()).unwrap();
    let slot = SlotName::for_model("org/model");
    let (first, path) = run.bind(&slot).unwrap();
    drop(first);
    assert!(fs::symlink_metadata(&path).unwrap().file_type().is_socket());

    let (_listener, again) = run.bind(&slot).unwrap();
    assert_eq!(again, path);
    assert_eq!(mode(&path), 0o600);
}

#[tokio::test]
async fn bind_refuses_to_replace_a_file_that_is_not_a_socket() {
    let state = tempfile::tempdir().unwrap();
    let run = RunDir::create(state.path()).unwrap();
    let slot = SlotName::parse("plain").unwrap();
    fs::write(run.socket_path(&slot).unwrap(), "data").unwrap();
    let err = run.bind(&slot).unwrap_err();
    assert!(matches!(err, RunDirError::NotASocket { .. }), "{err}");
}

#[test]
fn slot_names_reject_traversal_separators_and_nul() {
    for bad in [
        "",
        "..",
        "../x",
        "a/b",
        "a..b",
        ".hidden",
        "a\0b",
        "a b",
        &"x".repeat(65),
    ] {
        assert!(SlotName::parse(bad).is_err(), "{bad:?} was accepted");
    }
    assert_eq!(
        SlotName::parse("Qwen2.5-0.5B_q4").unwrap().as_str(),
        "Qwen2.5-0.5B_q4"
    );
}

#[test]
fn slots_for_hostile_or_similar_model_names_are_safe_and_distinct() {
    for model in [
        "../../etc/passwd",
        "/abs",
        "..",
        "a\0b",
        "mlx-community/Llama-3.2-1B-Instruct-4bit",
    ] {
        let slot = SlotName::for_model(model);
        assert!(
            SlotName::parse(slot.as_str()).is_ok(),
            "{model:?} -> {slot:?}"
        );
    }
    let long = "x".repeat(40);
    assert_ne!(
        SlotName::for_model(&format!("{long}a")),
        SlotName::for_model(&format!("{long}b"))
    );
}

#[test]
fn overlong_socket_paths_are_refused() {
    let state = tempfile::tempdir().unwrap();
    let deep = state.path().join("d".repeat(100));
    let run = RunDir::create(&deep).unwrap();
    let err = run.socket_path(&SlotName::for_model("m")).unwrap_err();
    assert!(
        matches!(err, RunDirError::SocketPathTooLong { .. }),
        "{err}"
    );
}

#[test]
fn reap_orphans_kills_recorded_workers_and_spares_other_processes() {
    let state = tempfile::tempdir().unwrap();
    let run = RunDir::create(state.path()).unwrap();
    let mut orphan = Command::new("sleep").arg("60").spawn().unwrap();
    let mut finished = Command::new("true").spawn().unwrap();
    finished.wait().unwrap();
    run.write_record(orphan.id(), "/bin/sleep".as_ref(), "m")
        .unwrap();
    run.write_record(finished.id(), "/bin/sleep".as_ref(), "m")
        .unwrap();
    // A live process with another name (this test binary): a recycled pid must be left alone.
    run.write_record(std::process::id(), "/bin/sleep".as_ref(), "m")
        .unwrap();
    let stale_socket = run.socket_path(&SlotName::parse("stale").unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&stale_socket).unwrap());

    let killed = reap_orphans(&run, "sleep");

    assert_eq!(killed, vec![orphan.id()]);
    assert_eq!(orphan.wait().unwrap().signal(), Some(9));
    assert_eq!(fs::read_dir(run.path().join("workers")).unwrap().count(), 0);
    assert!(!stale_socket.exists());
}
