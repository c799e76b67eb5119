//! A model spread over a group of ranks on MLX's ring backend, on loopback. First `corral-worker
//! generate --parallel pipeline|tensor` in one process per rank, as `mlx.launch` starts mlx-lm's:
//! each rank runs its share of the layers and passes its activations on through MLX's send and
//! receive, or its slice of every layer, summed with the others' through MLX's `all_sum`; the
//! tokens and their log-probabilities must be the one process's. Then `corral serve` with
//! `[models.ID] hosts = ["localhost", "localhost"]`: the same answers over HTTP, alone and in a
//! batch, and a rank killed under a stream takes down its group alone, which the next request
//! starts again.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

use corral_fixture::Arch;
use corral_tests::server::{Dirs, Server, alive, chat, client, sse_events};
use corral_tests::{PATIENCE, binary};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const PROMPT: &str = "The ranks of a pipeline pass each token's activations along";

pub(crate) fn toolchain(layout: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/toolchain")
        .join(layout)
}

fn generate(model: &Path) -> Command {
    let mut command = Command::new(binary("corral-worker"));
    command.args(["generate", "--prompt", PROMPT, "--max-tokens", "8"]);
    command.args(["--logprobs", "4", "--model"]).arg(model);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

/// Ranks that are killed if the test ends before they do.
struct Ranks(Vec<Child>);

impl Drop for Ranks {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `model` on `size` ranks on loopback ports, split as `parallel` says; each rank's output,
/// by rank.
fn run_group(model: &Path, size: usize, parallel: &str) -> Vec<Output> {
    let dir = tempfile::tempdir().unwrap();
    // Ports the system hands out now; the ranks bind them a moment later.
    let listeners: Vec<TcpListener> = (0..size)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let hosts: Vec<Vec<String>> = listeners
        .iter()
        .map(|listener| vec![listener.local_addr().unwrap().to_string()])
        .collect();
    drop(listeners);
    let hostfile = dir.path().join("hosts.json");
    std::fs::write(&hostfile, serde_json::to_string(&hosts).unwrap()).unwrap();
    let mut ranks = Ranks(Vec::new());
    for rank in 0..size {
        let mut command = generate(model);
        command.args(["--parallel", parallel]);
        command.env("MLX_RANK", rank.to_string());
        command.env("MLX_HOSTFILE", &hostfile);
        ranks.0.push(command.spawn().unwrap());
    }
    let started = Instant::now();
    while ranks
        .0
        .iter_mut()
        .any(|child| child.try_wait().unwrap().is_none())
    {
        assert!(started.elapsed() < PATIENCE, "the group did not finish");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let children = std::mem::take(&mut ranks.0);
    children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect()
}

fn tokens(output: &Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The layers a rank says it runs, from its `rank R of N: layers A..B of L` line.
fn layers_run(output: &Output) -> (usize, usize, usize) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .find(|line| line.starts_with("rank "))
        .unwrap_or_else(|| panic!("no rank line in {stderr}"));
    let (_, rest) = line.split_once("layers ").unwrap();
    let (range, rest) = rest.split_once(" of ").unwrap();
    let (start, end) = range.split_once("..").unwrap();
    let total = rest.split(',').next().unwrap();
    (
        start.parse().unwrap(),
        end.parse().unwrap(),
        total.parse().unwrap(),
    )
}

fn assert_same_tokens(alone: &[Value], group: &[Value], what: &str) {
    assert_eq!(alone.len(), group.len(), "{what}: answer lengths");
    for (step, (one, many)) in alone.iter().zip(group).enumerate() {
        assert_eq!(one["token"], many["token"], "{what}: token {step}");
        let pairs = |value: &Value| -> Vec<(u64, f64)> {
            std::iter::once((
                value["token"].as_u64().unwrap(),
                value["logprob"].as_f64().unwrap(),
            ))
            .chain(
                value["top"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|pair| (pair[0].as_u64().unwrap(), pair[1].as_f64().unwrap())),
            )
            .collect()
        };
        for ((id, logprob), (group_id, group_logprob)) in pairs(one).into_iter().zip(pairs(many)) {
            assert_eq!(id, group_id, "{what}: token {step}'s alternatives");
            assert!(
                (logprob - group_logprob).abs() <= 1e-4,
                "{what}: token {step}: {logprob} alone, {group_logprob} in the group"
            );
        }
    }
}

#[test]
fn a_pipeline_of_ranks_on_loopback_answers_as_one_process_does() {
    for (layout, size) in [
        ("qwen3/hf", 2),
        ("qwen3_moe/hf", 2),
        ("qwen3_5/hf", 2),
        ("qwen3_5_moe/hf", 4),
        ("smollm3/hf", 4),
        ("qwen3/gguf-q8_0/model.gguf", 2),
    ] {
        let model = toolchain(layout);
        let alone = tokens(&generate(&model).output().unwrap());
        assert!(!alone.is_empty(), "{layout}: no tokens");
        let outputs = run_group(&model, size, "pipeline");
        assert_same_tokens(&alone, &tokens(&outputs[0]), layout);
        // Every other rank prints nothing, and together they ran each layer once, the first
        // layers on the last rank.
        let mut next = 0;
        for (rank, output) in outputs.iter().enumerate().rev() {
            assert!(
                output.status.success() && output.stdout.is_empty() == (rank != 0),
                "{layout}: rank {rank}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let (start, end, total) = layers_run(output);
            assert_eq!(
                (start, total > start),
                (next, true),
                "{layout}: rank {rank}"
            );
            next = end;
        }
        assert_eq!(next, layers_run(&outputs[0]).2, "{layout}: every layer ran");
    }
}

#[test]
fn a_tensor_parallel_group_on_loopback_answers_as_one_process_does() {
    // The `_wide` fixtures have 4 key/value heads (and linear key heads), which 4 ranks split.
    for (layout, size) in [
        ("qwen3/hf", 2),
        ("qwen3_moe/hf", 2),
        ("qwen3_5/hf", 2),
        ("qwen3_5_moe/hf", 2),
        ("qwen3_next/hf", 2),
        ("qwen3_wide/hf", 4),
        ("qwen3_moe_wide/hf", 4),
        ("qwen3_5_wide/hf", 4),
    ] {
        let model = toolchain(layout);
        let alone = tokens(&generate(&model).output().unwrap());
        assert!(!alone.is_empty(), "{layout}: no tokens");
        let outputs = run_group(&model, size, "tensor");
        assert_same_tokens(&alone, &tokens(&outputs[0]), layout);
        // Each rank holds the same share, less than the whole checkpoint.
        let checkpoint: u64 = std::fs::read_dir(&model)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                path.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("model")
            })
            .map(|path| path.metadata().unwrap().len())
            .sum();
        let held: Vec<f64> = outputs.iter().map(slice_held).collect();
        assert!(
            held.iter().all(|&mib| mib == held[0])
                && held[0] > 0.0
                && held[0] * 1024.0 * 1024.0 < checkpoint as f64,
            "{layout}: ranks hold {held:?} MiB of a {checkpoint}-byte checkpoint"
        );
        assert!(
            outputs[1..].iter().all(|output| output.stdout.is_empty()),
            "{layout}: a rank other than 0 printed"
        );
    }
}

/// The MiB a tensor-parallel rank says it holds, from its `rank R of N: a slice of every layer,
/// weights X MiB` line.
fn slice_held(output: &Output) -> f64 {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .find(|line| line.contains("a slice of every layer"))
        .unwrap_or_else(|| panic!("no rank line in {stderr}"));
    let (_, rest) = line.split_once("weights ").unwrap();
    rest.trim_end_matches(" MiB").parse().unwrap()
}

#[test]
fn a_group_that_cannot_split_its_model_is_refused_by_every_rank() {
    for (layout, size, parallel, expected) in [
        // Two layers cannot be shared by four ranks.
        (
            "qwen3/hf",
            4,
            "pipeline",
            "a pipeline of 4 ranks cannot share 2 layers",
        ),
        // Nor two key/value heads.
        (
            "qwen3/hf",
            4,
            "tensor",
            "tensor parallel over 4 ranks cannot split model.layers.0.self_attn's 4 query and 2 key/value heads",
        ),
        (
            "qwen3/gguf-q8_0/model.gguf",
            2,
            "tensor",
            "tensor parallel splits safetensors checkpoints",
        ),
        // Latent attention does not split.
        ("glm4_moe_lite/hf", 2, "tensor", "not glm4_moe_lite"),
    ] {
        let outputs = run_group(&toolchain(layout), size, parallel);
        for (rank, output) in outputs.iter().enumerate() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{layout}: rank {rank} ran");
            assert!(stderr.contains(expected), "{layout}: rank {rank}: {stderr}");
        }
    }
}

const GROUPED: &str =
    "[models.grouped]\nhosts = [\"localhost\", \"localhost\"]\nparallel = \"pipeline\"\n";

const SLICED: &str =
    "[models.sliced]\nhosts = [\"localhost\", \"localhost\"]\nparallel = \"tensor\"\n";

/// A server with `checkpoint` as `alone` (one worker), as `grouped` (two ranks, a pipeline) and
/// as `sliced` (two ranks, tensor parallel).
fn serve_both(checkpoint: &Path) -> (Dirs, Server) {
    let dirs = Dirs::generated([]);
    for name in ["alone", "grouped", "sliced"] {
        std::os::unix::fs::symlink(checkpoint, dirs.models.path().join(name)).unwrap();
    }
    // Blocks small enough for the prompts here to fill some.
    let config = dirs.write_config(&format!(
        "[prefix_cache]\nblock_tokens = 16\n{GROUPED}{SLICED}"
    ));
    let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
    (dirs, server)
}

pub(crate) fn completion(server: &Server, model: &str, prompt: &str) -> String {
    let request = json!({"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0});
    let response = server.post("/v1/completions", &request);
    assert_eq!(response.status(), 200, "{model}: {prompt}");
    let body: Value = response.json().unwrap();
    body["choices"][0]["text"].as_str().unwrap().to_owned()
}

#[test]
fn a_group_of_two_local_ranks_answers_over_http_as_one_worker_alone_and_in_a_batch() {
    let (_dirs, server) = serve_both(&toolchain("qwen3_5/hf"));
    let prompts: Vec<String> = (0..8)
        .map(|index| format!("Request {index} asks the group about layer {}", index * 7))
        .collect();
    let alone: Vec<String> = prompts
        .iter()
        .map(|prompt| completion(&server, "alone", prompt))
        .collect();
    // Eight at once share the group's passes and answer as each did alone; so do the same
    // eight one after another.
    let server = std::sync::Arc::new(server);
    for group in ["grouped", "sliced"] {
        for (prompt, expected) in prompts.iter().zip(&alone) {
            assert_eq!(
                &completion(&server, group, prompt),
                expected,
                "{group}: {prompt}"
            );
        }
        let batch: Vec<_> = prompts
            .iter()
            .cloned()
            .map(|prompt| {
                let server = server.clone();
                std::thread::spawn(move || completion(&server, group, &prompt))
            })
            .collect();
        for ((prompt, expected), answer) in prompts.iter().zip(&alone).zip(batch) {
            assert_eq!(
                &answer.join().unwrap(),
                expected,
                "{group}: {prompt} in a batch"
            );
        }
    }
    // Rank 0 is the worker the server lists, with both ranks, each a process of its own whose
    // footprints add up to the group's.
    let mut listed = Vec::new();
    for group in ["grouped", "sliced"] {
        let row = server.worker_row(group);
        let ranks = row["ranks"].as_array().unwrap();
        assert_eq!(ranks.len(), 2, "{row}");
        assert_eq!(ranks[0]["pid"], row["pid"], "{row}");
        let footprints: Vec<u64> = ranks
            .iter()
            .map(|rank| rank["footprint_bytes"].as_u64().unwrap())
            .collect();
        assert!(footprints.iter().all(|bytes| *bytes > 0), "{row}");
        assert_eq!(
            row["footprint_bytes"],
            footprints.iter().sum::<u64>(),
            "{row}"
        );
        assert!(
            ranks.iter().all(|rank| rank["host"] == "localhost"),
            "{row}"
        );
        listed.extend(
            ranks
                .iter()
                .map(|rank| rank["pid"].as_u64().unwrap() as u32),
        );
    }
    // Metrics carry each rank's footprint, labelled by rank and host.
    let metrics = client()
        .get(server.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    for group in ["grouped", "sliced"] {
        for rank in 0..2 {
            let series = format!(
                "corral_worker_rank_footprint_bytes{{model=\"{group}\",rank=\"{rank}\",host=\"localhost\"}} "
            );
            let line = metrics.lines().find(|line| line.starts_with(&series));
            assert!(
                line.is_some_and(|line| line[series.len()..].parse::<u64>().unwrap() > 0),
                "{series} in\n{metrics}"
            );
        }
    }
    // A group's ranks each cache their part (a pipeline rank its own layers, a tensor-parallel
    // rank its slice of every layer) and restore a prefix together: the second time, the
    // prompt's whole blocks come from the cache, and the answer is the same.
    for group in ["grouped", "sliced"] {
        let long = format!("Nothing cached starts this {group}: {}", prompts.join(" "));
        let request = json!({"model": group, "prompt": long, "max_tokens": 8, "temperature": 0});
        let answers: Vec<Value> = (0..2)
            .map(|_| server.post("/v1/completions", &request).json().unwrap())
            .collect();
        let cached =
            |answer: &Value| answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
        assert_eq!(cached(&answers[0]), Some(0), "{group}: {}", answers[0]);
        assert!(
            cached(&answers[1]).unwrap() >= 16,
            "{group}: {}",
            answers[1]
        );
        assert_eq!(
            answers[0]["choices"][0]["text"], answers[1]["choices"][0]["text"],
            "{group}: {answers:?}"
        );
    }
    let alone = server.worker_row("alone");
    assert!(alone.get("ranks").is_none(), "{alone}");
    let mut workers = server.worker_pids();
    workers.retain(|pid| json!(pid) != alone["pid"]);
    workers.sort_unstable();
    listed.sort_unstable();
    assert_eq!(
        workers, listed,
        "the groups' processes are the ranks listed"
    );
}

#[test]
fn a_rank_killed_or_stopped_under_a_stream_ends_its_groups_stream_alone_and_the_group_starts_again()
{
    let dirs = Dirs::with_models(&[Arch::Llama, Arch::Qwen3]);
    let config = format!(
        "group_heartbeat_timeout_secs = 2\n{}",
        GROUPED.replace("grouped", "llama")
    );
    let config = dirs.write_config(&config);
    let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
    let first = completion(&server, "llama", "Tell me a story.");
    assert!(!completion(&server, "qwen3", "Tell me a story.").is_empty());
    let other = server.worker_row("qwen3")["pid"].as_u64().unwrap() as u32;
    // A killed rank ends at once; a stopped one is found silent at the heartbeat timeout.
    for signal in [Signal::SIGKILL, Signal::SIGSTOP] {
        let rank0 = server.worker_row("llama")["pid"].as_u64().unwrap() as u32;
        let ranks: Vec<u32> = server
            .worker_pids()
            .into_iter()
            .filter(|pid| *pid != other)
            .collect();
        assert_eq!(ranks.len(), 2, "{ranks:?}");
        let follower = *ranks.iter().find(|pid| **pid != rank0).unwrap();

        let response = server.post("/v1/chat/completions", &chat("llama", 500, true));
        signal_mid_stream(response, "\"delta\"", follower, signal);
        // Both ranks are gone; the other model's worker never noticed.
        corral_tests::wait_until("the group's ranks to be reaped", || {
            !alive(rank0) && !alive(follower)
        });
        assert_eq!(server.worker_row("qwen3")["pid"], other);
        assert!(!completion(&server, "qwen3", "Tell me a story.").is_empty());
        // The next request starts the group again, which answers as before.
        assert_eq!(completion(&server, "llama", "Tell me a story."), first);
        let restarted = server.worker_pids();
        assert_eq!(restarted.len(), 3, "{restarted:?}");
        assert!(!restarted.contains(&rank0) && !restarted.contains(&follower));
    }
    // An operator's kill ends every rank, and its answer says each rank's end, reaped here.
    let follower = server.worker_row("llama")["ranks"][1]["pid"].clone();
    let killed: Value = server
        .post("/admin/workers/llama/kill", &json!({}))
        .json()
        .unwrap();
    let ranks = killed["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 1, "{killed}");
    assert_eq!(
        (&ranks[0]["rank"], &ranks[0]["host"], &ranks[0]["pid"]),
        (&json!(1), &json!("localhost"), &follower),
        "{killed}"
    );
    assert_eq!(ranks[0]["confirmed"], true, "{killed}");
    assert!(
        ranks[0]["status"].as_str().unwrap().contains("signal"),
        "{killed}"
    );
    assert!(ranks[0]["freed_bytes"].as_u64().unwrap() > 0, "{killed}");
    assert!(!alive(follower.as_u64().unwrap() as u32));
}

/// Sends `signal` to the rank `pid` once `response`'s stream has begun (its first event holds
/// `begun`), and checks that the stream then ends with an error, never `[DONE]`; says how long
/// that took.
pub(crate) fn signal_mid_stream(
    response: reqwest::blocking::Response,
    begun: &str,
    pid: u32,
    signal: Signal,
) {
    assert_eq!(response.status(), 200);
    let mut events = sse_events(response);
    assert!(events.next().unwrap().contains(begun));
    let signalled = Instant::now();
    kill(Pid::from_raw(pid as i32), signal).unwrap();
    let rest: Vec<String> = events.collect();
    eprintln!(
        "{signal}: the stream ended {:.0} ms after its group's rank (pid {pid}) got it",
        signalled.elapsed().as_secs_f64() * 1000.0
    );
    let last = rest.last().map_or("", String::as_str);
    assert!(
        last.contains("\"error\"") && !rest.iter().any(|event| event == "[DONE]"),
        "{signal}: a stream whose group lost a rank ends with an error: {rest:?}"
    );
}

#[test]
fn a_group_of_more_ranks_than_layers_is_refused_with_the_reason_and_the_other_model_serves() {
    let dirs = Dirs::generated([]);
    for name in ["alone", "grouped"] {
        std::os::unix::fs::symlink(toolchain("qwen3/hf"), dirs.models.path().join(name)).unwrap();
    }
    let config = dirs.write_config(&GROUPED.replace(
        "\"localhost\", \"localhost\"",
        "\"localhost\", \"localhost\", \"localhost\"",
    ));
    let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
    let request = json!({"model": "grouped", "prompt": "Hello", "max_tokens": 4});
    let response = server.post("/v1/completions", &request);
    assert_eq!(response.status(), 400);
    let body: Value = response.json().unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("a pipeline of 3 ranks cannot share 2 layers"),
        "{body}"
    );
    assert!(!completion(&server, "alone", "Hello").is_empty());
    // No rank of the refused group is left behind.
    corral_tests::wait_until("one worker", || server.worker_pids().len() == 1);
}
