//! The agent CLIs themselves, headless against a real `corral serve` of the long-context fixture
//! (whose answers end, `layout::steer_to_end` in the fixture), each with its default
//! configuration and tool set: every CLI over every API it speaks must end with exit status 0 and
//! a non-empty answer; and Claude Code and Codex must each run a harmless tool of its own that
//! corral's `[models.ID] tool_choice` makes the model call, then answer. And Claude Code against
//! the real SmolLM2, too small a context for its prompt, must show its prompt-too-long error.
//! Skipped, with the reason, when `cargo xtask setup` could not install the CLIs (no npm).

use std::ffi::OsStr;
use std::path::Path;

use corral_tests::clients::{self, Api, Cli, Finished, Run, Sandbox};
use corral_tests::server::{Dirs, Server};
use serde_json::Value;

use super::serve_fixture;

const PROMPT: &str = "say hi";

/// Every CLI over every API it speaks.
const PAIRS: &[(Cli, Api)] = &[
    (Cli::ClaudeCode, Api::Messages),
    (Cli::Codex, Api::Responses),
    (Cli::Opencode, Api::Chat),
    (Cli::Opencode, Api::Messages),
    (Cli::Opencode, Api::Responses),
];

#[test]
fn each_cli_answers_through_corral_over_each_api() {
    let bin = match clients::installed() {
        Ok(bin) => bin,
        Err(reason) => return eprintln!("skipped: {reason}"),
    };
    let (server, _dirs) = serve_fixture("");
    let base_url = server.url("");
    // Every pair runs, so that one CLI's failure does not hide another's.
    let failures: Vec<String> = PAIRS
        .iter()
        .filter_map(|&(cli, api)| {
            let (finished, _sandbox) = run(&bin, cli, api, &base_url);
            let answered = answer(cli, &finished).is_some_and(|text| !text.trim().is_empty());
            (!finished.status.success() || !answered).then(|| {
                format!(
                    "{} over {}: no answer:\n{}",
                    cli.name(),
                    api.name(),
                    finished.transcript()
                )
            })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn each_cli_runs_the_tool_corral_makes_the_model_call() {
    let bin = match clients::installed() {
        Ok(bin) => bin,
        Err(reason) => return eprintln!("skipped: {reason}"),
    };
    let mut failures = Vec::new();
    // The fixture closes a forced call's strings and objects at once (`CLOSERS` in its layout),
    // so opencode's todowrite gets a short list; Claude Code's and Codex's tools take no
    // arguments.
    for (cli, api) in [
        (Cli::ClaudeCode, Api::Messages),
        (Cli::Codex, Api::Responses),
        (Cli::Opencode, Api::Chat),
    ] {
        let (tool, _) = cli.harmless_tool();
        let (server, _dirs) = serve_fixture(&format!(
            "[models.{}]\ntool_choice = \"{tool}\"\n",
            clients::MODEL
        ));
        let base_url = server.url("");
        let (finished, sandbox) = run(&bin, cli, api, &base_url);
        if !finished.status.success() || !tool_ran(cli, tool, &finished, &sandbox) {
            failures.push(format!(
                "{}: {tool} did not run:\n{}",
                cli.name(),
                finished.transcript()
            ));
        } else if answer(cli, &finished).is_none() {
            failures.push(format!(
                "{}: no answer after {tool}:\n{}",
                cli.name(),
                finished.transcript()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// With the real SmolLM2, whose 8,192-token context cannot hold Claude Code's prompt, Claude Code
/// ends at once and shows the context error as its own "Prompt is too long": corral words it as
/// Anthropic does.
#[test]
fn claude_code_shows_a_prompt_over_smollm2s_context_as_prompt_too_long() {
    let bin = match clients::installed() {
        Ok(bin) => bin,
        Err(reason) => return eprintln!("skipped: {reason}"),
    };
    let dirs = Dirs {
        models: tempfile::tempdir().unwrap(),
        state: tempfile::tempdir().unwrap(),
    };
    std::os::unix::fs::symlink(
        corral_tests::smollm2_gguf(),
        dirs.models.path().join(format!("{}.gguf", clients::MODEL)),
    )
    .unwrap();
    let config = dirs.write_config(&format!(
        "[aliases]\n\"claude-*\" = \"{}\"\n",
        clients::MODEL
    ));
    let server = Server::start_with(&dirs, &[OsStr::new("--config"), config.as_os_str()]);
    let (finished, _sandbox) = run(&bin, Cli::ClaudeCode, Api::Messages, &server.url(""));
    let shown = finished.json_lines().into_iter().any(|event| {
        event["type"] == "result"
            && event["is_error"] == true
            && event["result"]
                .as_str()
                .is_some_and(|text| text.to_lowercase().contains("prompt is too long"))
    });
    assert!(shown, "{}", finished.transcript());
}

fn run(bin: &Path, cli: Cli, api: Api, base_url: &str) -> (Finished, Sandbox) {
    let run = Run {
        cli,
        api,
        base_url,
        prompt: PROMPT,
        configured_model: true,
        attachment: None,
    };
    run.finish(bin)
}

/// The CLI's final answer, from its JSON events.
fn answer(cli: Cli, finished: &Finished) -> Option<String> {
    let events = finished.json_lines();
    let texts: Vec<&str> = match cli {
        Cli::ClaudeCode => events
            .iter()
            .filter(|event| event["type"] == "result" && event["is_error"] == false)
            .filter_map(|event| event["result"].as_str())
            .collect(),
        Cli::Codex => events
            .iter()
            .filter(|event| event["type"] == "item.completed")
            .filter(|event| event["item"]["type"] == "agent_message")
            .filter_map(|event| event["item"]["text"].as_str())
            .collect(),
        Cli::Opencode => events
            .iter()
            .filter(|event| event["type"] == "text")
            .filter_map(|event| event["part"]["text"].as_str())
            .collect(),
    };
    texts.last().map(|text| (*text).to_owned())
}

/// Whether the CLI ran `tool` and has its result: Claude Code and opencode say so in their
/// events; Codex's events leave function tools out, so its session log in the run's home is read.
fn tool_ran(cli: Cli, tool: &str, finished: &Finished, sandbox: &Sandbox) -> bool {
    let events = finished.json_lines();
    match cli {
        Cli::ClaudeCode => events.iter().any(|event| {
            event["type"] == "user"
                && event["message"]["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|block| block["type"] == "tool_result" && block["is_error"] != true)
        }),
        Cli::Codex => codex_session_lines(&sandbox.home.path().join(".codex/sessions"))
            .iter()
            .any(|line| line["payload"]["type"] == "function_call_output"),
        Cli::Opencode => events.iter().any(|event| {
            event["type"] == "tool_use"
                && event["part"]["tool"] == tool
                && event["part"]["state"]["status"] == "completed"
        }),
    }
}

/// Every JSON line of every session log under `dir` (Codex's `sessions/YYYY/MM/DD/*.jsonl`).
fn codex_session_lines(dir: &Path) -> Vec<Value> {
    let mut lines = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return lines;
    };
    for entry in entries.map_while(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            lines.extend(codex_session_lines(&path));
        } else if path.extension().is_some_and(|ext| ext == "jsonl") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            lines.extend(
                text.lines()
                    .filter_map(|line| serde_json::from_str(line).ok()),
            );
        }
    }
    lines
}
