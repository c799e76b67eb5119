//! `corral pull` and `POST /admin/models/pull` end to end: the real binary against a fake
//! Hugging Face hub on 127.0.0.1 (`corral_tests::fake_hub`) serving a generated model, into a
//! Hugging Face home in a temporary directory. Complete, cut and resumed, corrupted, gated,
//! weightless and GGUF repositories, and names that must never reach the hub or the disk.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use corral_fixture::Arch;
use corral_tests::fake_hub::{FakeHub, FakeRepo, sha256};
use corral_tests::server::{Dirs, Server, chat};
use corral_tests::{binary, tiny_model};
use serde_json::{Value, json};

const TINY: &str = "corral-test/tiny-llama";

/// A fake hub serving a generated tiny model as `TINY` (with files a pull must leave alone), and
/// an empty Hugging Face home to pull into.
struct Setup {
    hub: FakeHub,
    fixture: tempfile::TempDir,
    repo: FakeRepo,
    home: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let fixture = tiny_model(Arch::Llama);
        let mut repo = FakeRepo::from_dir(fixture.path());
        let extras: [(&str, &[u8]); 4] = [
            ("README.md", b"# tiny llama\n"),
            (".gitattributes", b"*.safetensors filter=lfs\n"),
            ("pytorch_model.bin", b"not needed"),
            ("original/consolidated.safetensors", b"not at the top"),
        ];
        for (name, bytes) in extras {
            repo.files.insert(name.to_owned(), bytes.to_vec());
        }
        let hub = FakeHub::start();
        hub.add(TINY, repo.clone());
        Self {
            hub,
            fixture,
            repo,
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn pull(&self, args: &[&str]) -> Output {
        self.pull_with_env(args, &[])
    }

    fn pull_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(binary("corral"))
            .arg("pull")
            .args(args)
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_CACHE")
            .env("HF_HOME", self.home.path())
            .env("HF_ENDPOINT", self.hub.endpoint())
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    fn repo_dir(&self, id: &str) -> PathBuf {
        self.home
            .path()
            .join("hub")
            .join(format!("models--{}", id.replace('/', "--")))
    }

    fn snapshot(&self) -> PathBuf {
        self.repo_dir(TINY)
            .join("snapshots")
            .join(&self.repo.commit)
    }

    /// The blob the weights are stored as: their sha256.
    fn weights_blob(&self) -> PathBuf {
        let weights = &self.repo.files["model.safetensors"];
        self.repo_dir(TINY).join("blobs").join(sha256(weights))
    }

    fn fixture_files(&self) -> BTreeSet<String> {
        names_in(self.fixture.path())
    }
}

fn names_in(dir: &Path) -> BTreeSet<String> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

fn succeeded(output: &Output) -> (String, String) {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "corral pull failed: {stderr}");
    (stdout, stderr)
}

fn failed(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "corral pull succeeded: {stderr}");
    stderr
}

/// The snapshot's files are the fixture's, each a link into `blobs/`.
fn assert_snapshot_is_the_fixture(setup: &Setup) {
    let snapshot = setup.snapshot();
    assert_eq!(names_in(&snapshot), setup.fixture_files());
    for name in setup.fixture_files() {
        let pulled = std::fs::read(snapshot.join(&name)).unwrap();
        assert_eq!(
            pulled,
            std::fs::read(setup.fixture.path().join(&name)).unwrap(),
            "{name}"
        );
        let target = std::fs::read_link(snapshot.join(&name)).unwrap();
        assert!(
            target.starts_with("../../blobs"),
            "{name} -> {}",
            target.display()
        );
    }
    let refs_main = std::fs::read_to_string(setup.repo_dir(TINY).join("refs/main")).unwrap();
    assert_eq!(refs_main, setup.repo.commit);
    let blobs = names_in(&setup.repo_dir(TINY).join("blobs"));
    assert!(
        blobs.iter().all(|blob| !blob.ends_with(".incomplete")),
        "{blobs:?}"
    );
}

#[test]
fn a_pull_puts_the_models_files_in_the_hugging_face_cache_and_a_second_finds_them_there() {
    let setup = Setup::new();
    let (stdout, stderr) = succeeded(&setup.pull(&[TINY]));
    assert_eq!(stdout.trim(), setup.snapshot().display().to_string());
    assert_snapshot_is_the_fixture(&setup);
    let weights = std::fs::read_link(setup.snapshot().join("model.safetensors")).unwrap();
    assert_eq!(
        weights,
        Path::new("../../blobs").join(setup.weights_blob().file_name().unwrap())
    );
    // Not a terminal: plain log lines, down to each file's end.
    assert!(
        stderr.contains("downloading") && stderr.contains("percent=100"),
        "{stderr}"
    );
    for untouched in [
        "README.md",
        "pytorch_model.bin",
        ".gitattributes",
        "consolidated",
    ] {
        assert!(
            setup
                .hub
                .requests()
                .iter()
                .all(|seen| !seen.path.contains(untouched)),
            "{untouched} was requested"
        );
    }

    let before = setup.hub.requests().len();
    let (_, stderr) = succeeded(&setup.pull(&[&format!("{TINY}@main")]));
    assert!(stderr.contains("already in the cache"), "{stderr}");
    let downloads = setup.hub.requests()[before..]
        .iter()
        .filter(|seen| seen.method == "GET" && !seen.path.starts_with("/api/"))
        .count();
    assert_eq!(downloads, 0, "{:?}", setup.hub.requests());
    assert_snapshot_is_the_fixture(&setup);
}

#[test]
fn a_pull_cut_in_the_middle_is_resumed_by_the_next_with_a_range_request() {
    let setup = Setup::new();
    let size = setup.repo.files["model.safetensors"].len();
    let cut = size / 2;
    setup.hub.cut_next_download("model.safetensors", cut);

    let stderr = failed(&setup.pull(&[TINY]));
    assert!(
        stderr.contains("model.safetensors")
            && stderr.contains("interrupted")
            && stderr.contains("run the pull again"),
        "{stderr}"
    );
    let partial = setup.weights_blob().with_extension("incomplete");
    let kept = std::fs::metadata(&partial).unwrap().len();
    assert_eq!(
        kept, cut as u64,
        "the bytes received before the cut are kept"
    );
    assert!(!setup.snapshot().join("model.safetensors").exists());
    assert!(!setup.snapshot().join("config.json").exists());

    succeeded(&setup.pull(&[TINY]));
    let downloads = setup.hub.downloads_of("model.safetensors");
    assert_eq!(downloads.len(), 2, "{downloads:?}");
    assert_eq!(downloads[0].range, None);
    assert_eq!(
        downloads[1].range.as_deref(),
        Some(&*format!("bytes={kept}-"))
    );
    assert!(!partial.exists());
    assert_snapshot_is_the_fixture(&setup);
}

#[test]
fn a_file_whose_sha256_differs_from_the_listing_is_refused_and_nothing_links_to_it() {
    let setup = Setup::new();
    setup.hub.corrupt("model.safetensors");

    let stderr = failed(&setup.pull(&[TINY]));
    assert!(
        stderr.contains("model.safetensors")
            && stderr.contains("corrupt")
            && stderr.contains("sha256"),
        "{stderr}"
    );
    let blob = setup.weights_blob();
    assert!(!blob.exists() && !blob.with_extension("incomplete").exists());
    let snapshot = setup.snapshot();
    assert!(!snapshot.join("model.safetensors").exists());
    for name in names_in(&snapshot) {
        assert!(snapshot.join(&name).exists(), "{name} links to nothing");
    }
    assert!(!setup.repo_dir(TINY).join("refs/main").exists());
}

#[test]
fn a_gated_model_says_to_set_hf_token_and_downloads_with_it() {
    let setup = Setup::new();
    let mut gated = setup.repo.clone();
    gated.token = Some("hf_test_token".to_owned());
    setup.hub.add("corral-test/gated", gated);

    let stderr = failed(&setup.pull(&["corral-test/gated"]));
    let page = format!("{}/corral-test/gated", setup.hub.endpoint());
    for expected in ["gated", "HF_TOKEN", "licence", "401", page.as_str()] {
        assert!(stderr.contains(expected), "no {expected:?} in {stderr}");
    }
    assert!(!setup.repo_dir("corral-test/gated").join("blobs").exists());

    let token = [("HF_TOKEN", "hf_test_token")];
    succeeded(&setup.pull_with_env(&["corral-test/gated"], &token));
    let resolves: Vec<_> = setup
        .hub
        .requests()
        .into_iter()
        .filter(|seen| seen.path.contains("/resolve/"))
        .collect();
    assert!(resolves.iter().any(|seen| seen.method == "GET"));
    let with_token = resolves.iter().filter(|seen| seen.authorization.is_some());
    assert!(with_token.clone().count() > 0);
    assert!(
        with_token
            .into_iter()
            .all(|seen| seen.authorization.as_deref() == Some("Bearer hf_test_token"))
    );
}

#[test]
fn a_repository_without_usable_weights_is_named_with_what_it_holds() {
    let setup = Setup::new();
    let files = [
        ("README.md".to_owned(), b"# no weights".to_vec()),
        ("pytorch_model.bin".to_owned(), b"pickle".to_vec()),
        ("config.json".to_owned(), b"{}".to_vec()),
    ];
    setup.hub.add(
        "corral-test/no-weights",
        FakeRepo::with_files(files.into_iter().collect()),
    );

    let stderr = failed(&setup.pull(&["corral-test/no-weights"]));
    for expected in [
        "corral-test/no-weights",
        "no weights",
        "README.md",
        "pytorch_model.bin",
    ] {
        assert!(stderr.contains(expected), "no {expected:?} in {stderr}");
    }
    assert!(!setup.repo_dir("corral-test/no-weights").exists());
}

#[test]
fn names_that_could_become_other_paths_never_reach_the_hub_or_the_disk() {
    let setup = Setup::new();
    for name in [
        "../x",
        "a/b/c",
        "/etc/passwd",
        "a/..",
        "..",
        "org/name@../../x",
        "org/na--me",
    ] {
        let stderr = failed(&setup.pull(&[name]));
        assert!(
            stderr.contains("is not a model id") || stderr.contains("is not a revision"),
            "{name}: {stderr}"
        );
    }
    assert!(
        setup.hub.requests().is_empty(),
        "{:?}",
        setup.hub.requests()
    );
    assert!(names_in(setup.home.path()).is_empty());
}

#[test]
fn a_gguf_repository_with_several_files_needs_file_and_downloads_only_that_one() {
    let setup = Setup::new();
    let files = [
        ("model.Q4_0.gguf".to_owned(), b"GGUF q4_0 stand-in".to_vec()),
        (
            "model.Q8_0.gguf".to_owned(),
            b"GGUF q8_0 stand-in, longer".to_vec(),
        ),
        ("README.md".to_owned(), b"# ggufs".to_vec()),
    ];
    let repo = FakeRepo::with_files(files.into_iter().collect());
    setup.hub.add("corral-test/ggufs", repo.clone());

    let stderr = failed(&setup.pull(&["corral-test/ggufs"]));
    assert!(
        stderr.contains("--file") && stderr.contains("model.Q4_0.gguf, model.Q8_0.gguf"),
        "{stderr}"
    );
    let stderr = failed(&setup.pull(&["corral-test/ggufs", "--file", "model.Q5_K.gguf"]));
    assert!(stderr.contains("model.Q5_K.gguf"), "{stderr}");

    let (stdout, _) = succeeded(&setup.pull(&["corral-test/ggufs", "--file", "model.Q8_0.gguf"]));
    let snapshot = setup
        .repo_dir("corral-test/ggufs")
        .join("snapshots")
        .join(&repo.commit);
    assert_eq!(
        stdout.trim(),
        snapshot.join("model.Q8_0.gguf").display().to_string()
    );
    assert_eq!(
        names_in(&snapshot),
        BTreeSet::from(["model.Q8_0.gguf".to_owned()])
    );
    assert_eq!(
        std::fs::read(snapshot.join("model.Q8_0.gguf")).unwrap(),
        repo.files["model.Q8_0.gguf"]
    );
    assert!(setup.hub.downloads_of("model.Q4_0.gguf").is_empty());
}

#[test]
fn the_admin_route_streams_a_pull_and_the_pulled_model_answers_without_a_restart() {
    let setup = Setup::new();
    let mut gated = setup.repo.clone();
    gated.token = Some("hf_test_token".to_owned());
    setup.hub.add("corral-test/gated", gated);
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let endpoint = setup.hub.endpoint();
    let hub_cache = setup.home.path().join("hub");
    let env: [(&str, &OsStr); 4] = [
        ("HF_HOME", setup.home.path().as_os_str()),
        ("HF_HUB_CACHE", hub_cache.as_os_str()),
        ("HF_ENDPOINT", OsStr::new(&endpoint)),
        ("HF_TOKEN", OsStr::new("")),
    ];
    let server = Server::start_with_env(&dirs, &[], &env);

    let refused = |body: Value, status: u16, code: &str| {
        let response = server.post("/admin/models/pull", &body);
        assert_eq!(response.status(), status, "{body}");
        let error: Value = response.json().unwrap();
        assert_eq!(error["error"]["code"], code, "{error}");
        error["error"]["message"].as_str().unwrap().to_owned()
    };
    refused(json!({"model": "../x"}), 400, "invalid_model_id");
    refused(
        json!({"model": TINY, "file": "../x.gguf"}),
        400,
        "invalid_file",
    );
    refused(json!({"nope": TINY}), 400, "invalid_body");
    let gated = refused(
        json!({"model": "corral-test/gated"}),
        403,
        "hub_model_gated",
    );
    assert!(gated.contains("HF_TOKEN"), "{gated}");
    assert!(
        setup
            .hub
            .requests()
            .iter()
            .all(|seen| !seen.path.starts_with("/cdn/"))
    );

    let response = server.post("/admin/models/pull", &json!({"model": TINY}));
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let events: Vec<Value> = BufReader::new(response)
        .lines()
        .map(|line| serde_json::from_str(&line.unwrap()).unwrap())
        .collect();
    assert_eq!(events[0]["status"], "resolved", "{events:?}");
    assert_eq!(events[0]["commit"], setup.repo.commit.as_str());
    assert!(events.iter().any(|event| {
        event["status"] == "downloading"
            && event["file"] == "model.safetensors"
            && event["bytes"] == event["total"]
    }));
    let done = events.last().unwrap();
    assert_eq!(done["status"], "done", "{events:?}");
    assert_eq!(done["path"], setup.snapshot().display().to_string());
    assert_eq!(done["served_as"], json!([TINY]), "{done}");
    assert_snapshot_is_the_fixture(&setup);

    let answer = server.post("/v1/chat/completions", &chat(TINY, 2, false));
    assert_eq!(answer.status(), 200);
    let answer: Value = answer.json().unwrap();
    assert_eq!(answer["model"], TINY);
}
