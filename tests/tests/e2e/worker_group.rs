//! A model spread over a group of ranks on MLX's ring backend, on loopback: `corral-worker
//! generate --pipeline` in one process per rank, as `mlx.launch` starts mlx-lm's. Each rank runs
//! its share of the layers and passes its activations on through MLX's send and receive; the
//! tokens and their log-probabilities must be the one process's.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

use corral_tests::{PATIENCE, binary};
use serde_json::Value;

const PROMPT: &str = "The ranks of a pipeline pass each token's activations along";

fn toolchain(layout: &str) -> PathBuf {
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

/// Runs `model` as a pipeline of `size` ranks on loopback ports; each rank's output, by rank.
fn run_group(model: &Path, size: usize) -> Vec<Output> {
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
        command.arg("--pipeline");
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
        ("qwen3/gguf-q8_0/model.gguf", 2),
    ] {
        let model = toolchain(layout);
        let alone = tokens(&generate(&model).output().unwrap());
        assert!(!alone.is_empty(), "{layout}: no tokens");
        let outputs = run_group(&model, size);
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
fn more_ranks_than_layers_is_refused_by_every_rank() {
    // Two layers cannot be shared by four ranks.
    let outputs = run_group(&toolchain("qwen3/hf"), 4);
    for (rank, output) in outputs.iter().enumerate() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "rank {rank} ran");
        assert!(
            stderr.contains("a pipeline of 4 ranks cannot share 2 layers"),
            "rank {rank}: {stderr}"
        );
    }
}
