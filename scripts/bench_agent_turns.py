#!/usr/bin/env python3
"""Time to first token per turn of an agent's conversation, corral against peer servers.

Every turn resends the whole history: a long system prompt, then per turn the server's own last
answer and a new user message of ~150 tokens (40 filler words), as agent CLIs do; so a server that reuses what the
last turn computed (its prompt and its answer) prefills only the new message. Six turns by
default, growing to about 1,500 tokens. Servers, on the same random-weight Llama (small, 197M
params) from shared/peers/setup.sh:
  corral     `corral serve` (f32 safetensors)
  mlx_lm     mlx_lm.server (the same f32 safetensors, OpenBLAS preloaded)
  llama.cpp  llama-cpp-python's server (the same weights as f16 GGUF, 2 threads; set up with
             `WITH_LLAMACPP=1 bash shared/peers/setup.sh`)
Each server runs PASSES fresh conversations (a nonce opens the system prompt, so no pass reuses
another's), streamed, greedy, 32 tokens an answer; the table shows each turn's median TTFT (send
to first content delta) and its prompt and cached tokens. The machine is noisy: compare servers within one
run, never absolute times across runs. Loopback only; every server runs in its own process
group and is ended when its passes are done, also on an error.

Usage: scripts/bench_agent_turns.py [--bin-dir target/release] [--peers /tmp/corral-peers]
       [--servers corral,mlx_lm,llama.cpp] [--passes 3] [--turns 6] [--port 18190]
"""

import argparse
import json
import os
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = "small"
ANSWER_TOKENS = 32
OPENBLAS = Path(f"/usr/lib/{os.uname().machine}-linux-gnu/openblas-pthread/libopenblas.so.0")


def words(seed: int, count: int) -> str:
    """Deterministic filler text, different per seed."""
    return " ".join(f"item{(seed * 7919 + i * 104729) % 997}" for i in range(count))


def server_command(name: str, args, port: int, workdir: Path):
    peers = args.peers
    f32 = peers / "models" / f"{MODEL}-llama-f32"
    env = dict(os.environ)
    if name == "corral":
        models = workdir / "models"
        models.mkdir(parents=True, exist_ok=True)
        link = models / MODEL
        if not link.exists():
            link.symlink_to(f32)
        # corral's worker sockets live under HOME, and a socket path is limited to 103 bytes.
        env["HOME"] = tempfile.mkdtemp(prefix="cat-", dir="/tmp")
        cmd = [str(args.bin_dir / "corral"), "serve", "--host", "127.0.0.1", "--port", str(port),
               "--models-dir", str(models)]
        return cmd, env, "/health"
    if name == "mlx_lm":
        env.update(LD_PRELOAD=str(OPENBLAS), HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(peers / "hf-cache"))
        cmd = [str(peers / "venv/bin/python"), "-m", "mlx_lm", "server", "--model", str(f32),
               "--host", "127.0.0.1", "--port", str(port)]
        return cmd, env, "/v1/models"
    if name == "llama.cpp":
        cmd = [str(peers / "venv-llama/bin/python"), "-m", "llama_cpp.server",
               "--model", str(peers / "models" / f"{MODEL}-llama.f16.gguf"),
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
               "--n_threads", "2", "--n_threads_batch", "2", "--logits_all", "False",
               "--interrupt_requests", "False", "--verbose", "False",
               "--chat_format", "chatml"]
        return cmd, env, "/v1/models"
    raise SystemExit(f"unknown server {name}")


def wait_ready(url: str, proc, deadline: float):
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server not ready in time")


def turn(port: int, model: str, messages) -> tuple[float, str, int, int]:
    """One streamed turn: TTFT in seconds, the answer, and the prompt and cached tokens if
    reported (0 if not)."""
    body = {"model": model, "messages": messages, "max_tokens": ANSWER_TOKENS, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                     json.dumps(body).encode(), {"content-type": "application/json"})
    sent = time.perf_counter()
    first, answer, prompt_tokens, cached_tokens = None, [], 0, 0
    with urllib.request.urlopen(request, timeout=600) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
                prompt_tokens = usage.get("prompt_tokens", 0)
                cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            for choice in chunk.get("choices", []):
                content = (choice.get("delta") or {}).get("content")
                if content:
                    first = first or time.perf_counter()
                    answer.append(content)
    end = time.perf_counter()
    return (first or end) - sent, "".join(answer), prompt_tokens, cached_tokens or 0


def conversation(port: int, model: str, turns: int, nonce: str):
    system = f"Session {nonce}. You are a coding agent. " + words(0, 80)
    messages = [{"role": "system", "content": system}]
    rows = []
    for index in range(turns):
        messages.append({"role": "user", "content": f"Step {index}: " + words(index + 1, 40)})
        ttft, answer, prompt_tokens, cached_tokens = turn(port, model, messages)
        rows.append((ttft, prompt_tokens, cached_tokens))
        messages.append({"role": "assistant", "content": answer})
    return rows


def bench(name: str, args, port: int, run_dir: Path):
    workdir = run_dir / name
    workdir.mkdir(parents=True)
    cmd, env, health = server_command(name, args, port, workdir)
    log = open(workdir / "server.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=workdir)
    try:
        wait_ready(f"http://127.0.0.1:{port}{health}", proc, time.time() + 300)
        model = MODEL if name == "corral" else str(args.peers / "models" / f"{MODEL}-llama-f32")
        if name == "llama.cpp":
            model = MODEL
        passes = []
        for index in range(args.passes):
            passes.append(conversation(port, model, args.turns, f"{name}-{os.getpid()}-{index}"))
            print(f"{name} pass {index + 1}: " + " ".join(f"{row[0]:.2f}" for row in passes[-1]),
                  file=sys.stderr, flush=True)
        return passes
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        if env.get("HOME", "").startswith("/tmp/cat-"):
            shutil.rmtree(env["HOME"], ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", type=Path, default=ROOT / "target/release")
    parser.add_argument("--peers", type=Path, default=Path("/tmp/corral-peers"))
    parser.add_argument("--servers", default="corral,mlx_lm,llama.cpp")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--port", type=int, default=18190)
    args = parser.parse_args()
    run_dir = args.peers / "runs" / f"agent-turns-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    results = {}
    for offset, name in enumerate(args.servers.split(",")):
        results[name] = bench(name, args, args.port + offset, run_dir)
    names = list(results)
    print(f"median TTFT (s) per turn over {args.passes} passes; prompt/cached tokens as each "
          "server reports them (0: not reported)")
    print("| turn | " + " | ".join(f"{n} TTFT | {n} prompt/cached" for n in names) + " |")
    print("|---" * (1 + 2 * len(names)) + "|")
    for index in range(args.turns):
        cells = []
        for name in names:
            ttfts = [rows[index][0] for rows in results[name]]
            prompt = statistics.median(rows[index][1] for rows in results[name])
            cached = statistics.median(rows[index][2] for rows in results[name])
            cells += [f"{statistics.median(ttfts):.3f}", f"{int(prompt)}/{int(cached)}"]
        print(f"| {index + 1} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
