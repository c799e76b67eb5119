//! Records what each CLI sends: every case of `CASES` run against the capture server, its
//! requests written to `tests/data/clients/<case>.json`. Ignored by default (it needs the CLIs
//! and rewrites the recordings); run it with
//! `cargo xtask cargo test -p corral-tests --test e2e -- --ignored clients::record`.

use corral_tests::capture::{CaptureServer, ToolCall};
use corral_tests::clients::{self, Run};
use serde_json::{Value, json};

use super::{CASES, Case, recordings_dir};

const PROMPT: &str = "say hi";
const TOOL_PROMPT: &str = "list the tasks or files here";
const IMAGE_PROMPT: &str = "what is in this picture?";

/// The image the image cases attach (a small PNG, so that the recordings stay small).
fn image() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/vision/images/wide.png")
}

#[test]
#[ignore = "rewrites tests/data/clients/ from the installed CLIs"]
fn record_every_client_request() {
    record_cases(CASES.iter());
}

/// The cases whose prompt comes with an image alone, for a recording of those only.
#[test]
#[ignore = "rewrites tests/data/clients/*image.json from the installed CLIs"]
fn record_image_requests() {
    record_cases(CASES.iter().filter(|case| case.image));
}

fn record_cases<'a>(cases: impl Iterator<Item = &'a Case>) {
    let bin = clients::installed().unwrap_or_else(|reason| panic!("{reason}"));
    std::fs::create_dir_all(recordings_dir()).unwrap();
    for case in cases {
        let requests = record(&bin, case);
        let recording = json!({
            "cli": case.cli.name(),
            "version": clients::version(case.cli),
            "api": case.api.name(),
            "requests": requests,
        });
        let path = recordings_dir().join(format!("{}.json", case.name()));
        let text = serde_json::to_string_pretty(&recording).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
        eprintln!("recorded {}", path.display());
    }
}

fn record(bin: &std::path::Path, case: &Case) -> Vec<Value> {
    let tool = case.tool.then(|| {
        let (name, arguments) = case.cli.harmless_tool();
        ToolCall {
            name: name.to_owned(),
            arguments,
        }
    });
    let capture = CaptureServer::start(tool);
    let attachment = case.image.then(image);
    let base_url = capture.base_url();
    let run = Run {
        cli: case.cli,
        api: case.api,
        base_url: &base_url,
        prompt: match (case.image, case.tool) {
            (true, _) => IMAGE_PROMPT,
            (false, true) => TOOL_PROMPT,
            (false, false) => PROMPT,
        },
        configured_model: case.configured_model(),
        attachment: attachment.as_deref(),
    };
    let (finished, sandbox) = run.finish(bin);
    assert!(
        finished.status.success(),
        "{}: {}",
        case.name(),
        finished.transcript()
    );
    // Only the API's own requests: Claude Code's reachability check (`HEAD /`) is not one.
    let requests: Vec<Value> = capture
        .requests()
        .into_iter()
        .filter(|request| request["method"] == "POST")
        .map(|request| serde_json::from_str(&sandbox.scrub(&request.to_string())).unwrap())
        .collect();
    assert!(!requests.is_empty(), "{}: no request", case.name());
    if case.tool {
        let last = requests.last().unwrap().to_string();
        assert!(
            last.contains("toolu_capture") || last.contains("call_capture"),
            "{}: the last of {} requests carries no tool result:\n{}",
            case.name(),
            requests.len(),
            finished.transcript()
        );
    }
    requests
}
