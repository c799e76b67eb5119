#!/usr/bin/env python3
"""A model over 1, 2 and 4 ranks on loopback (MLX's ring backend), split as a pipeline and tensor
parallel, corral beside mlx-lm's own on the same checkpoint, greedy, one sequence.

The checkpoint: a random-weight Qwen2 made by transformers (`Qwen2Config`: hidden 1024, 16 layers,
16 heads, 4 KV heads, intermediate 2816, tied embeddings, seed 0) with the toolchain fixture's
tokenizer (tests/data/toolchain/qwen2/hf), float32 safetensors in shards of at most 200 MB with
their index, which mlx-lm's `sharded_load` needs to read only its ranks' files. Qwen2 is one of the
families mlx-lm 0.32.2 both pipelines and shards.

Rows: `corral-worker generate` (alone, then `--parallel pipeline` or `--parallel tensor` per rank)
and mlx-lm (`load`, then `sharded_load(pipeline_group=...)` or `sharded_load(tensor_group=...)`
per rank, then `stream_generate`), each rank a process given `MLX_RANK` and `MLX_HOSTFILE` as
`mlx.launch` gives them. Columns: prefill and
decode tokens/s and the time to the first token as rank 0 reports them (corral's stderr figures;
mlx-lm's `prompt_tps`, `generation_tps`); the most any rank held resident (`/usr/bin/time`'s
maximum RSS) and the weights each rank holds (corral's `rank R of N` line; mlx-lm's parameters'
bytes on that rank). Medians over `--passes`.

A second table serves the same groups to clients: `corral serve` with `[models.qwen2] hosts`
(one "localhost" per rank) and `parallel`, 1 and then 8 clients sending streamed completions at
once; beside it mlx-lm's `batch_generate` of the same 8 prompts on each rank of its sharded
model (mlx-lm has no distributed server). Columns: the median time to each client's first token
(corral; mlx-lm's batch gives none per prompt, so its prompt time stands in) and the tokens/s all
clients together received. With `--hosts local,member`, each group also runs with its odd ranks
on a member host: a second `corral serve` on loopback, with its own state directory, key and
models, which the first starts those ranks through (`[cluster]`), so that the control path of a
group across hosts is timed beside the same group on one. Prints markdown tables; no assertions.

Made once and kept (delete to remake): the checkpoint under build/bench-worker-group/, with
build/reference/hf-venv's transformers and torch. mlx runs with OpenBLAS preloaded.

Usage: python3 scripts/bench_worker_group.py [--bin-dir target/debug] [--passes 3]
       [--ranks 1,2,4] [--parallel pipeline,tensor] [--max-tokens 64]
       [--hosts local,member] [--skip-generate]
"""

import argparse
import concurrent.futures
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HF_PYTHON = ROOT / "build/reference/hf-venv/bin/python"
OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"
CHECKPOINT = ROOT / "build/bench-worker-group/qwen2"
TOKENIZER = ROOT / "tests/data/toolchain/qwen2/hf"
PROMPT = " ".join(f"Rank {i} passes its activations to rank {i + 1} along the ring." for i in range(4))

MAKE = """
import shutil, sys, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
out, tokenizer = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
config = Qwen2Config(hidden_size=1024, num_hidden_layers=16, num_attention_heads=16,
                     num_key_value_heads=4, intermediate_size=2816, vocab_size=128,
                     tie_word_embeddings=True, max_position_embeddings=4096)
model = Qwen2ForCausalLM(config).to(torch.float32)
model.save_pretrained(out, max_shard_size="200MB")
for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(f"{tokenizer}/{name}", f"{out}/{name}")
"""

MLX_LM = """
import json, os, sys
import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm import load, stream_generate
from mlx_lm.utils import sharded_load
path, prompt, max_tokens, parallel = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if "MLX_RANK" in os.environ:
    group = mx.distributed.init(strict=True, backend="ring")
    model, tokenizer = sharded_load(path, **{f"{parallel}_group": group})
    rank = group.rank()
else:
    model, tokenizer = load(path)
    rank = 0
held = sum(v.nbytes for _, v in tree_flatten(model.parameters()) if v.size)
last = None
for response in stream_generate(model, tokenizer, prompt, max_tokens=max_tokens):
    last = response
# The generator has one step in flight on every rank: let all finish before any leaves the ring.
mx.synchronize()
if "MLX_RANK" in os.environ:
    mx.eval(mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu))
print(json.dumps({"rank": rank, "weights": held, "prompt_tokens": last.prompt_tokens,
                  "prompt_tps": last.prompt_tps, "generation_tps": last.generation_tps}))
"""


MLX_LM_BATCH = """
import json, os, sys
import mlx.core as mx
from mlx_lm import load, batch_generate
from mlx_lm.utils import sharded_load
path, prompts, max_tokens, parallel = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if "MLX_RANK" in os.environ:
    group = mx.distributed.init(strict=True, backend="ring")
    model, tokenizer = sharded_load(path, **{f"{parallel}_group": group})
else:
    model, tokenizer = load(path)
encoded = [tokenizer.encode(prompt) for prompt in prompts]
response = batch_generate(model, tokenizer, encoded, max_tokens=max_tokens)
mx.synchronize()
if "MLX_RANK" in os.environ:
    mx.eval(mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu))
stats = response.stats
print(json.dumps({"prompt_time": stats.prompt_time, "generation_tokens": stats.generation_tokens,
                  "wall_time": stats.wall_time}))
"""


def client_prompt(index):
    return f"Client {index} asks: " + PROMPT


def make_checkpoint():
    if (CHECKPOINT / "model.safetensors.index.json").exists():
        return
    CHECKPOINT.mkdir(parents=True, exist_ok=True)
    subprocess.run([HF_PYTHON, "-c", MAKE, CHECKPOINT, TOKENIZER], check=True)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_ranks(command, ranks, env):
    """Runs `command` as `ranks` processes (one alone); each one's (stdout, stderr, max RSS KiB)."""
    with tempfile.TemporaryDirectory() as scratch:
        hostfile = Path(scratch) / "hosts.json"
        hostfile.write_text(json.dumps([[f"127.0.0.1:{p}"] for p in free_ports(ranks)]))
        processes = []
        for rank in range(ranks):
            rank_env = dict(env)
            if ranks > 1:
                rank_env.update(MLX_RANK=str(rank), MLX_HOSTFILE=str(hostfile))
            timing = Path(scratch) / f"time{rank}"
            processes.append((subprocess.Popen(
                ["/usr/bin/time", "-f", "%M", "-o", timing, *command],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=rank_env), timing))
        results = []
        try:
            for process, timing in processes:
                out, err = process.communicate(timeout=1800)
                if process.returncode != 0:
                    sys.exit(f"{command[0]} failed:\n{err[-2000:]}")
                results.append((out, err, int(timing.read_text().split()[-1])))
        finally:
            for process, _ in processes:
                process.kill()
        return results


def corral(bin_dir, ranks, parallel, max_tokens):
    command = [bin_dir / "corral-worker", "generate", "--model", CHECKPOINT, "--prompt", PROMPT,
               "--max-tokens", str(max_tokens)]
    if ranks > 1:
        command += ["--parallel", parallel]
    results = run_ranks([str(part) for part in command], ranks, dict(os.environ))
    err = results[0][1]
    prompt = re.search(r"prompt: (\d+) tokens, ([\d.]+) tokens/s", err)
    decode = re.search(r"decode: (\d+) tokens, ([\d.]+) tokens/s", err)
    weights = [float(m) for _, e, _ in results for m in re.findall(r"weights ([\d.]+) MiB", e)[:1]]
    return {
        "prefill": float(prompt.group(2)),
        "decode": float(decode.group(2)),
        "ttft": int(prompt.group(1)) / float(prompt.group(2)),
        "rss": max(rss for _, _, rss in results) / 1024,
        "weights": max(weights),
    }


def mlx_lm(ranks, parallel, max_tokens):
    env = dict(os.environ, LD_PRELOAD=OPENBLAS, HF_HUB_OFFLINE="1")
    command = [str(HF_PYTHON), "-c", MLX_LM, str(CHECKPOINT), PROMPT, str(max_tokens), parallel]
    results = run_ranks(command, ranks, env)
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _, _ in results]
    first = next(report for report in reports if report["rank"] == 0)
    return {
        "prefill": first["prompt_tps"],
        "decode": first["generation_tps"],
        "ttft": first["prompt_tokens"] / first["prompt_tps"],
        "rss": max(rss for _, _, rss in results) / 1024,
        "weights": max(report["weights"] for report in reports) / 2**20,
    }


def stream_completion(port, prompt, max_tokens):
    """(seconds to the first token, tokens received, seconds to the last) of one streamed completion."""
    body = {"model": "qwen2", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "stream": True, "stream_options": {"include_usage": True}}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    sent = time.perf_counter()
    first, tokens = None, 0
    with urllib.request.urlopen(request, timeout=1800) as response:
        for line in response:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            if first is None and any(c.get("text") for c in event.get("choices") or []):
                first = time.perf_counter() - sent
    return first, tokens, time.perf_counter() - sent


def cluster_key(bin_dir, state):
    return subprocess.run([str(bin_dir / "corral"), "key", "--state-dir", str(state)],
                          check=True, capture_output=True, text=True).stdout.strip()


def serve(bin_dir, scratch, name, config_text):
    """A `corral serve` of the checkpoint as `qwen2`, in `scratch/name`; its process and port."""
    root = scratch / name
    models = root / "models"
    models.mkdir(parents=True)
    (models / "qwen2").symlink_to(CHECKPOINT)
    config = root / "corral.toml"
    config.write_text(config_text)
    port = free_ports(1)[0]
    server = subprocess.Popen(
        [str(bin_dir / "corral"), "serve", "--host", "127.0.0.1", "--port", str(port),
         "--models-dir", str(models), "--state-dir", str(root / "state"), "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return server, port


def corral_clients(bin_dir, ranks, parallel, clients, max_tokens, member=False):
    """Median TTFT and the aggregate tokens/s of `clients` concurrent streams through `corral
    serve`; with `member`, the group's odd ranks run on a second corral, a member host."""
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        servers = []
        config = ""
        if ranks > 1 and member:
            keys = {}
            for name in ("coordinator", "member"):
                (scratch / name / "state").mkdir(parents=True)
                keys[name] = cluster_key(bin_dir, scratch / name / "state")
            # Each host's ranks take successive ports from its ring address.
            listen, ring = free_ports(2)
            member_server, _ = serve(
                bin_dir, scratch, "member",
                f'[cluster]\nlisten = "127.0.0.1:{listen}"\ncoordinators = ["{keys["coordinator"]}"]\n')
            servers.append(member_server)
            hosts = ", ".join('"member"' if rank % 2 else '"localhost"' for rank in range(ranks))
            config = (f'[cluster]\nring = "127.0.0.1:{ring}"\n[cluster.hosts.member]\n'
                      f'address = "127.0.0.1:{listen}"\nkey = "{keys["member"]}"\n'
                      f'ring = "127.0.0.1:{ring + ranks}"\n')
        elif ranks > 1:
            hosts = ", ".join(['"localhost"'] * ranks)
        if ranks > 1:
            config += f'[models.qwen2]\nhosts = [{hosts}]\nparallel = "{parallel}"\n'
        server, port = serve(bin_dir, scratch, "coordinator", config)
        servers.append(server)
        try:
            # The first request starts the group; time only what follows.
            deadline = time.time() + 600
            while True:
                try:
                    stream_completion(port, "warm up", 1)
                    break
                except OSError:
                    if time.time() > deadline or server.poll() is not None:
                        sys.exit("corral serve did not answer")
                    time.sleep(0.5)
            started = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(clients) as pool:
                results = list(pool.map(lambda i: stream_completion(port, client_prompt(i),
                                                                    max_tokens), range(clients)))
            wall = time.perf_counter() - started
        finally:
            for running in servers:
                os.killpg(running.pid, 9)
                running.wait()
    return {"ttft": statistics.median(first for first, _, _ in results),
            "tps": sum(tokens for _, tokens, _ in results) / wall}


def mlx_lm_batch(ranks, parallel, clients, max_tokens):
    env = dict(os.environ, LD_PRELOAD=OPENBLAS, HF_HUB_OFFLINE="1")
    prompts = json.dumps([client_prompt(i) for i in range(clients)])
    command = [str(HF_PYTHON), "-c", MLX_LM_BATCH, str(CHECKPOINT), prompts, str(max_tokens),
               parallel]
    out = run_ranks(command, ranks, env)[0][0]
    report = json.loads(out.strip().splitlines()[-1])
    return {"ttft": report["prompt_time"],
            "tps": report["generation_tokens"] / report["wall_time"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", type=Path, default=ROOT / "target/debug")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--parallel", default="pipeline,tensor")
    parser.add_argument("--clients", default="1,8",
                        help="client counts for the served table; empty to skip it")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--hosts", default="local",
                        help="local, member, or both: where a served group's odd ranks run")
    parser.add_argument("--skip-generate", action="store_true",
                        help="only the served table")
    args = parser.parse_args()
    make_checkpoint()
    splits = args.parallel.split(",")
    if not args.skip_generate:
        generate_table(args, splits)
    if args.clients:
        served_table(args, splits)


def generate_table(args, splits):
    print("| engine | ranks | split | prefill tok/s | decode tok/s | TTFT s | weights per rank MiB "
          "| max RSS per rank MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for ranks in [int(r) for r in args.ranks.split(",")]:
        for parallel in splits if ranks > 1 else ["-"]:
            for name, run in (
                ("corral", lambda: corral(args.bin_dir, ranks, parallel, args.max_tokens)),
                ("mlx-lm", lambda: mlx_lm(ranks, parallel, args.max_tokens)),
            ):
                passes = [run() for _ in range(args.passes)]
                median = {key: statistics.median(p[key] for p in passes) for key in passes[0]}
                print(f"| {name} | {ranks} | {parallel} | {median['prefill']:.1f} | "
                      f"{median['decode']:.1f} | {median['ttft']:.2f} | {median['weights']:.0f} | "
                      f"{median['rss']:.0f} |", flush=True)


def served_table(args, splits):
    print()
    print("| engine | ranks | split | clients | median TTFT s | tokens/s, all clients |")
    print("|---|---|---|---|---|---|")
    hosts = args.hosts.split(",")
    for ranks in [int(r) for r in args.ranks.split(",")]:
        for parallel in splits if ranks > 1 else ["pipeline"]:
            for clients in [int(c) for c in args.clients.split(",")]:
                runs = []
                if "local" in hosts or ranks == 1:
                    runs.append(("corral", lambda: corral_clients(
                        args.bin_dir, ranks, parallel, clients, args.max_tokens)))
                if "member" in hosts and ranks > 1:
                    runs.append(("corral, odd ranks on a member", lambda: corral_clients(
                        args.bin_dir, ranks, parallel, clients, args.max_tokens, member=True)))
                if clients > 1:
                    runs.append(("mlx-lm", lambda: mlx_lm_batch(ranks, parallel, clients,
                                                                args.max_tokens)))
                for name, run in runs:
                    passes = [run() for _ in range(args.passes)]
                    median = {key: statistics.median(p[key] for p in passes) for key in passes[0]}
                    split = parallel if ranks > 1 else "-"
                    print(f"| {name} | {ranks} | {split} | {clients} | {median['ttft']:.2f} | "
                          f"{median['tps']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
