#!/usr/bin/env python3
"""A hybrid model's prefix cache (its gated DeltaNet state in tails and boundary snapshots): TTFT
of a long conversation's next turn cold, RAM-warm and SSD-warm (after the worker was killed), decode tok/s
at 1 and 8 sequences, and bytes per snapshot. Prints one markdown table; no assertions.

The model is transformers' tiny Qwen3.5 (tests/data/toolchain/qwen3_5/hf: 2 DeltaNet and 2
attention layers, hidden 64) with its embedding and head grown to the `corral fixture --size
tiny` tokenizer, as the e2e test builds it. Tiny on purpose: it measures the cache's mechanics (what
is prefilled, what a restore costs), not a real model's compute. Times are noisy on a shared
machine: compare rows within one run.

With --mlx-lm PYTHON (a venv with mlx-lm, e.g. build/reference/venv/bin/python), the same
turns against mlx_lm.server on the same checkpoint (its own prompt cache; no SSD tier); mlx-lm
0.32.2 cannot read transformers' Qwen3.5 checkpoint (tests/data/toolchain/index.json has its
error), so that row records its failure until a later mlx-lm does.

Usage: scripts/bench_hybrid_prefix.py [--bin-dir target/debug] [--tokens 8400] [--port 18230]
       [--mlx-lm PYTHON]
"""

import argparse
import json
import os
import random
import signal
import struct
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINT = ROOT / "tests/data/toolchain/qwen3_5/hf"
# The tensors with a row per token: the embedding and the untied head.
PER_TOKEN = {"model.language_model.embed_tokens.weight", "lm_head.weight"}
BLOCK_TOKENS = 256


def grow_embedding(source: Path, target: Path, vocab: int):
    """Copies a safetensors file, the embedding and head grown to `vocab` rows of small random
    values."""
    raw = source.read_bytes()
    header_len = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + header_len])
    data = raw[8 + header_len :]
    rng = random.Random(7)
    tensors, out_header, offset = [], {}, 0
    for name, meta in header.items():
        if name == "__metadata__":
            out_header[name] = meta
            continue
        begin, end = meta["data_offsets"]
        payload = data[begin:end]
        shape = list(meta["shape"])
        if name in PER_TOKEN:
            extra = (vocab - shape[0]) * shape[1]
            payload += struct.pack(f"<{extra}f", *(rng.gauss(0, 0.02) for _ in range(extra)))
            shape[0] = vocab
        out_header[name] = {"dtype": meta["dtype"], "shape": shape,
                            "data_offsets": [offset, offset + len(payload)]}
        tensors.append(payload)
        offset += len(payload)
    encoded = json.dumps(out_header).encode()
    encoded += b" " * (-len(encoded) % 8)
    target.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(tensors))


def make_model(bin_dir: Path, models: Path) -> dict:
    model = models / "hybrid"
    subprocess.run([str(bin_dir / "corral"), "fixture", "--size", "tiny", "--out", str(model)],
                   check=True, stdout=subprocess.DEVNULL)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    for path in model.glob("*.safetensors*"):
        path.unlink()
    config = json.loads((CHECKPOINT / "config.json").read_text())
    config["text_config"]["vocab_size"] = vocab
    (model / "config.json").write_text(json.dumps(config))
    grow_embedding(CHECKPOINT / "model.safetensors", model / "model.safetensors", vocab)
    return config["text_config"]


def snapshot_bytes(text: dict) -> tuple:
    """Bytes of one boundary snapshot and of one block's keys and values (f32 model)."""
    linear = text["num_hidden_layers"] - text["num_hidden_layers"] // text["full_attention_interval"]
    channels = (2 * text["linear_num_key_heads"] * text["linear_key_head_dim"]
                + text["linear_num_value_heads"] * text["linear_value_head_dim"])
    conv = (text["linear_conv_kernel_dim"] - 1) * channels * 4
    delta = text["linear_num_value_heads"] * text["linear_value_head_dim"] * text["linear_key_head_dim"] * 4
    attention = text["num_hidden_layers"] - linear
    block = attention * 2 * text["num_key_value_heads"] * BLOCK_TOKENS * text["head_dim"] * 4
    return linear * (conv + delta), block


MODEL_NAME = {"name": "hybrid"}
OPENBLAS = Path(f"/usr/lib/{os.uname().machine}-linux-gnu/openblas-pthread/libopenblas.so.0")


def post(port: int, body: dict, stream: bool):
    body = dict(body, model=MODEL_NAME["name"], temperature=0, stream=stream)
    if stream:
        body["stream_options"] = {"include_usage": True}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    deadline = time.time() + 300
    while True:
        try:
            return urllib.request.urlopen(request, timeout=600)
        except urllib.error.HTTPError as error:
            if error.code != 503 or time.time() > deadline:
                raise
            time.sleep(0.2)


def timed(port: int, messages: list, max_tokens: int) -> dict:
    """TTFT, decode tok/s and usage of one streamed request."""
    sent = time.time()
    first = last = None
    tokens, usage = 0, {}
    with post(port, {"messages": messages, "max_tokens": max_tokens}, True) as response:
        for line in response:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            usage = event.get("usage") or usage
            if event.get("choices") and event["choices"][0]["delta"].get("content"):
                now = time.time()
                first = first or now
                last = now
                tokens += 1
    rate = (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0
    return {"ttft": (first or time.time()) - sent, "rate": rate, "usage": usage}


def conversation(nonce: int, tokens: int) -> tuple:
    long = " ".join(f"item{(nonce * 7919 + i) % 97}" for i in range(tokens // 3))
    first = [{"role": "user", "content": long}]
    second = first + [{"role": "assistant", "content": "Noted."},
                      {"role": "user", "content": "Now summarise it in one line."}]
    return first, second


def wait_healthy(port: int, path: str):
    deadline = time.time() + 300
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.3)


def decode_rows(port: int) -> list:
    short = [{"role": "user", "content": "Tell me about items."}]
    rows = [("decode, 1 sequence", timed(port, short, 64))]
    results = [None] * 8

    def one(index):
        results[index] = timed(port, [{"role": "user", "content": f"Item {index}?"}], 64)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    mean = sum(r["rate"] for r in results) / 8
    rows.append(("decode, 8 sequences (per sequence)",
                 {"ttft": max(r["ttft"] for r in results), "rate": mean, "usage": results[0]["usage"]}))
    return rows


def run_mlx_lm(python: str, model: Path, port: int, tokens: int) -> list:
    MODEL_NAME["name"] = str(model)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    if OPENBLAS.exists():
        env["LD_PRELOAD"] = str(OPENBLAS)
    server = subprocess.Popen([python, "-m", "mlx_lm", "server", "--model", str(model),
                               "--host", "127.0.0.1", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        wait_healthy(port, "/health")
        first, second = conversation(1, tokens)
        timed(port, conversation(0, 300)[0], 4)
        rows = [("mlx_lm: first turn (cold)", timed(port, first, 8)),
                ("mlx_lm: next turn, warm", timed(port, second, 8)),
                ("mlx_lm: next turn, cold (other nonce)",
                 timed(port, conversation(2, tokens)[1], 8))]
        return rows + [(f"mlx_lm: {name}", row) for name, row in decode_rows(port)]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def worker_pid(serve_pid: int) -> int:
    out = subprocess.run(["pgrep", "-P", str(serve_pid)], capture_output=True, text=True).stdout
    return int(out.split()[0])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", type=Path, default=ROOT / "target/debug")
    parser.add_argument("--tokens", type=int, default=8400)
    parser.add_argument("--port", type=int, default=18230)
    parser.add_argument("--mlx-lm", help="python of a venv with mlx-lm, to run mlx_lm.server too")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hyb-", dir="/tmp"))
    models = work / "models"
    models.mkdir()
    text = make_model(args.bin_dir, models)
    config = work / "corral.toml"
    config.write_text(f"[prefix_cache]\nblock_tokens = {BLOCK_TOKENS}\ndir = \"{work / 'kv'}\"\n")
    env = dict(os.environ, HOME=str(work))
    server = subprocess.Popen(
        [str(args.bin_dir / "corral"), "serve", "--host", "127.0.0.1", "--port", str(args.port),
         "--models-dir", str(models), "--config", str(config)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    rows = []
    try:
        wait_healthy(args.port, "/health")
        first, second = conversation(1, args.tokens)
        timed(args.port, conversation(0, 300)[0], 4)
        turn = timed(args.port, first, 8)
        rows.append(("first turn (cold)", turn))
        rows.append(("next turn, RAM-warm", timed(args.port, second, 8)))
        rows.append(("next turn, cold (other nonce)", timed(args.port, conversation(2, args.tokens)[1], 8)))
        time.sleep(2)  # lets the writer persist the blocks
        os.kill(worker_pid(server.pid), signal.SIGKILL)
        time.sleep(1)
        rows.append(("next turn, SSD-warm (worker killed)", timed(args.port, second, 8)))
        rows += decode_rows(args.port)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    if args.mlx_lm:
        rows += run_mlx_lm(args.mlx_lm, models / "hybrid", args.port + 1, args.tokens)
    snapshot, block = snapshot_bytes(text)
    print(f"| what | prompt tokens | cached | TTFT s | decode tok/s |")
    print(f"|---|---|---|---|---|")
    for name, row in rows:
        usage = row["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        # A few-token answer has no meaningful rate: only the decode rows report one.
        rate = f"{row['rate']:.1f}" if "decode" in name else ""
        print(f"| {name} | {usage.get('prompt_tokens', '')} | {cached} | {row['ttft']:.2f} | {rate} |")
    print(f"\nsnapshot: {snapshot} bytes; a {BLOCK_TOKENS}-token block's keys and values: {block} bytes")


if __name__ == "__main__":
    main()
