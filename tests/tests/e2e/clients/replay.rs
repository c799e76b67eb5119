//! Every recorded request of `tests/data/clients/` sent to a real `corral serve` of the
//! long-context fixture, headers and body as the CLI sent them, except the answer's length: at
//! most 16 tokens (`max_tokens`, `max_output_tokens`, set where the CLI left it out too), since
//! random weights would otherwise write until the context is full. Each must be accepted and, when
//! it streams, its stream must end as its API ends one. The requests whose prompt came with an
//! image (`*image.json`: Claude Code's `@` mention, Codex's `--image`, opencode's `--file`, alone
//! and with a tool round trip) go to the vision checkpoints instead (Qwen3.5's and Gemma 4's),
//! which a text model would refuse them for.

use std::io::{BufRead, BufReader};

use corral_tests::server::{Server, client};
use serde_json::{Value, json};

use corral_tests::clients::MODEL;
use corral_tests::server::Dirs;

use super::{recordings_dir, serve_fixture};

const ANSWER_TOKENS: u64 = 16;

/// The recordings, those with an image or those without.
fn recordings(with_image: bool) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(recordings_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .filter(|path| path.to_string_lossy().ends_with("image.json") == with_image)
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no recordings in {}",
        recordings_dir().display()
    );
    files
}

#[test]
fn every_recorded_client_request_is_served() {
    let (server, _dirs) = serve_fixture("");
    replay_all(&server, recordings(false), |_| Ok(()));
}

#[test]
fn every_recorded_request_with_an_image_reaches_a_vision_model() {
    // Qwen3.5's checkpoint with every recording, and Gemma 4's, whose template writes the
    // clients' tools its own way, with opencode's: Claude Code's and Codex's prompts are 59,000
    // and 29,000 tokens of its small vocabulary, minutes of this CPU (Gemma 4's template renders
    // Claude Code's tools in `chat_template`'s tests).
    for (fixture, clients) in [("qwen3_5/hf", ""), ("gemma4/hf", "opencode")] {
        let model = MODEL;
        let dirs = Dirs::with_models(&[]);
        crate::images::vision_model_from(&dirs, model, fixture);
        let config = dirs.write_config(&format!(
            "[aliases]\n\"claude-*\" = \"{model}\"\n\"gpt-*\" = \"{model}\"\n"
        ));
        let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
        // Each carries its image as an image part of its API, not as text about a file.
        let files = recordings(true)
            .into_iter()
            .filter(|file| file.to_string_lossy().contains(clients))
            .collect();
        replay_all(&server, files, |body| {
            let text = body.to_string();
            let parts = [
                "\"type\":\"image\"",
                "\"type\":\"input_image\"",
                "\"type\":\"image_url\"",
            ];
            if parts.iter().any(|part| text.contains(part)) {
                Ok(())
            } else {
                Err("no image part".to_owned())
            }
        });
        // And the vision tower encoded them: they reached the model as an image's rows.
        let metrics = server.metrics();
        let encoded = metrics
            .lines()
            .find_map(|line| {
                line.strip_prefix(&format!(
                    "corral_images_encoded_total{{model=\"{model}\"}} "
                ))
            })
            .and_then(|count| count.parse::<u64>().ok());
        assert!(
            encoded.is_some_and(|count| count >= 1),
            "{fixture}: {metrics}"
        );
    }
}

/// Replays every request of `files`, each checked by `check` first; asserts all were served.
fn replay_all(
    server: &Server,
    files: Vec<std::path::PathBuf>,
    check: impl Fn(&Value) -> Result<(), String>,
) {
    let mut failures = Vec::new();
    for file in files {
        let recording: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        for (index, request) in recording["requests"].as_array().unwrap().iter().enumerate() {
            if let Err(failure) = check(&request["body"]).and_then(|()| replay(server, request)) {
                failures.push(format!("{name} request {index}: {failure}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Sends one recorded request; `Err` says what went wrong, with the server's answer.
fn replay(server: &Server, request: &Value) -> Result<(), String> {
    let path = request["path"].as_str().unwrap();
    let mut body = request["body"].clone();
    let limit = if path.contains("/responses") {
        "max_output_tokens"
    } else {
        "max_tokens"
    };
    body[limit] = json!(ANSWER_TOKENS);
    if body.get("max_completion_tokens").is_some() {
        body["max_completion_tokens"] = json!(ANSWER_TOKENS);
    }
    let mut http = client().post(server.url(path));
    for (name, value) in request["headers"].as_object().unwrap() {
        // Credentials were redacted; encodings and connection handling are reqwest's to choose.
        let skipped = value == "<redacted>"
            || matches!(
                name.as_str(),
                "accept-encoding" | "connection" | "content-type"
            );
        if !skipped {
            http = http.header(name, value.as_str().unwrap());
        }
    }
    let response = http.json(&body).send().map_err(|error| error.to_string())?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{status}: {}", response.text().unwrap_or_default()));
    }
    if body["stream"] != true {
        return Ok(());
    }
    let data: Vec<String> = BufReader::new(response)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| line.strip_prefix("data: ").map(str::to_owned))
        .collect();
    let last = data.last().cloned().unwrap_or_default();
    let ended = if path.contains("/chat/completions") {
        last == "[DONE]"
    } else {
        let last: Value = serde_json::from_str(&last).unwrap_or(Value::Null);
        matches!(
            last["type"].as_str(),
            Some("message_stop" | "response.completed" | "response.incomplete")
        )
    };
    if ended {
        Ok(())
    } else {
        Err(format!("{status}, but the stream ended with: {last}"))
    }
}
