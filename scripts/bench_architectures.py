"""corral beside mlx_lm.server on the same random-weight checkpoint of each architecture, in one run.

Usage (from the repository root, after `cargo xtask cargo build --release --bins` and with the
reference venv of `cargo xtask reference`):

    build/reference/hf-venv/bin/python scripts/bench_architectures.py [--archs qwen3_moe,llama]
        [--passes 3] [--no-sweep] [--no-peer] [--work /tmp/corral-bench-architectures]

Each architecture of scripts/reference/toolchain.json (the configs of the test fixtures in
tests/data/toolchain) is scaled to hidden size 512 and 4 layers (vocabulary 1024), built as
toolchain.py builds it (transformers' own config class and model, seeded random weights,
`save_pretrained`) with a small byte-level BPE tokenizer trained here on local text, and
converted by `mlx_lm.convert` (float32) to the mlx-community layout; where mlx-lm cannot convert
it, the Hugging Face layout is served. Both servers then serve that directory, one at a time, and
per pass measure:

- decode tok/s at 1 sequence: one streamed request, (tokens - 1) / (last - first token time);
- decode tok/s at 8 sequences: 8 concurrent streamed requests, all their tokens after each one's
  first over the span from the first first token to the last token;
- prefill tok/s: a ~1000-token prompt with max_tokens 1, prompt tokens / time to the answer;
- peak memory: the server's process tree's resident set (sampled every 20 ms), and its resident
  set after the first request (the model loaded).

The table holds the medians of the passes. The expert sweep serves qwen3_moe with 8, 32 and 128
experts (top 2) in the original Hugging Face layout (one tensor per expert, stacked at load) and
prints the decode step time at one sequence: with only the chosen experts computed it stays flat
as the experts multiply. Random weights may end a completion early at an end-of-sequence token;
rates are computed from the tokens actually streamed. Numbers from a shared machine are noisy:
compare the two servers within a run, not runs with each other.
"""

import argparse
import copy
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "reference"))

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"
VOCAB = 1024
HIDDEN = 512
LAYERS = 4
DECODE_TOKENS = 64
PREFILL_WORDS = 700


# ----------------------------------------------------------------------------------------------
# Checkpoints


def scaled(config, experts=None, top_k=None):
    """The fixture's config at bench size; per-layer lists cut or repeated to the layer count."""
    config = copy.deepcopy(config)
    text = config.get("text_config", config)
    heads = 8
    text["hidden_size"] = HIDDEN
    text["num_hidden_layers"] = LAYERS
    text["num_attention_heads"] = heads
    text["num_key_value_heads"] = 4
    if "head_dim" in text:
        text["head_dim"] = HIDDEN // heads
    # LFM2 sizes its feed-forward input by `block_dim`, which equals the hidden size.
    if "block_dim" in text:
        text["block_dim"] = HIDDEN
    text["vocab_size"] = VOCAB
    if "vocab_size" in config and config is not text:
        config["vocab_size"] = VOCAB
    for key, width in [
        ("intermediate_size", 1024),
        ("intermediate_size_mlp", 1024),
        ("moe_intermediate_size", 256),
        ("block_ff_dim", 1024),
    ]:
        if key in text:
            text[key] = width
    for key in ["layer_types", "no_rope_layers"]:
        if isinstance(text.get(key), list) and text[key]:
            pattern = text[key]
            text[key] = [pattern[i % len(pattern)] for i in range(LAYERS)]
    scaling = text.get("rope_parameters") or text.get("rope_scaling") or {}
    for key in ["long_factor", "short_factor"]:
        if isinstance(scaling.get(key), list):
            rotated = text.get("head_dim", HIDDEN // heads) * text.get("partial_rotary_factor", 1)
            half = int(rotated) // 2
            scaling[key] = [scaling[key][i % len(scaling[key])] for i in range(half)]
    if experts is not None:
        text["num_experts"] = experts
        text["num_experts_per_tok"] = top_k
    if "max_position_embeddings" in text:
        text["max_position_embeddings"] = max(text["max_position_embeddings"], 4096)
    return config


def train_tokenizer(directory):
    """A byte-level BPE of VOCAB tokens on local text, ChatML special tokens, as JSON files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    files = sorted(str(p) for p in Path("/usr/share/common-licenses").glob("*") if p.is_file())
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train(files, trainer)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    template = (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
        "message['content'] + '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<|im_end|>",
                "bos_token": None,
                "pad_token": "<|endoftext|>",
                "chat_template": template,
            }
        )
    )


def build_checkpoint(spec, directory, tokenizer_dir, hf_layout=False):
    """The checkpoint to serve: mlx_lm.convert's float32 layout in `directory`, or with
    `hf_layout` (or where mlx-lm cannot convert it) transformers' own, beside it."""
    import torch
    import toolchain
    from mlx_lm.convert import convert

    hf_dir = directory if hf_layout else directory.with_name(directory.name + "-hf")
    if not (hf_dir / "config.json").exists():
        config = toolchain.build_config(spec)
        torch.manual_seed(spec["seed"])
        model = toolchain.model_class(spec).from_config(config, dtype=torch.float32)
        toolchain.redraw(model, spec["seed"])
        model.save_pretrained(hf_dir, save_original_format=spec.get("save_original_format", True))
        for name in ["tokenizer.json", "tokenizer_config.json"]:
            shutil.copy(tokenizer_dir / name, hf_dir / name)
    if hf_layout or (directory / "config.json").exists():
        return directory
    try:
        convert(hf_path=str(hf_dir), mlx_path=str(directory), dtype="float32")
    except Exception as error:  # mlx-lm's own limit: both servers get transformers' layout
        shutil.rmtree(directory, ignore_errors=True)
        print(f"mlx_lm.convert cannot convert it ({error}); serving the Hugging Face layout")
        return hf_dir
    return directory


# ----------------------------------------------------------------------------------------------
# Servers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_rss(pid):
    """Resident bytes of pid and its descendants."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
    return total


class Server:
    def __init__(self, name, command, port, model, env, log):
        self.name, self.port, self.model = name, port, model
        self.log = open(log, "w")
        self.process = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **env},
            start_new_session=True,
        )
        self.peak = 0
        self.sampling = True
        self.sampler = threading.Thread(target=self._sample, daemon=True)
        self.sampler.start()

    def _sample(self):
        while self.sampling:
            self.peak = max(self.peak, tree_rss(self.process.pid))
            time.sleep(0.02)

    def wait_ready(self, timeout=300):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}")
            try:
                self.complete("Hello", 2, stream=False)
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"{self.name} not ready in {timeout}s")

    def stop(self):
        self.sampling = False
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.log.close()

    def complete(self, prompt, max_tokens, stream=True):
        """(token arrival times, prompt tokens, send time) of one completion."""
        body = {
            "model": self.model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0.0, "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        sent = time.perf_counter()
        times, prompt_tokens = [], None
        with urllib.request.urlopen(request, timeout=600) as response:
            if not stream:
                answer = json.loads(response.read())
                times.append(time.perf_counter())
                return times, answer.get("usage", {}).get("prompt_tokens"), sent
            for line in response:
                line = line.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if event.get("usage"):
                    prompt_tokens = event["usage"].get("prompt_tokens")
                if any(choice.get("text") for choice in event.get("choices") or []):
                    times.append(time.perf_counter())
        return times, prompt_tokens, sent


def words(count, seed):
    vocabulary = ("the model serves tokens from weights while memory holds every expert and "
                  "the router picks two of them for each position in the prompt").split()
    return " ".join(vocabulary[(seed * 7 + i * 13) % len(vocabulary)] for i in range(count))


def one_pass(server, index):
    times, _, _ = server.complete(f"{index} " + words(30, index), DECODE_TOKENS)
    single = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")
    step_ms = 1000 / single if single == single and single > 0 else float("nan")

    with ThreadPoolExecutor(8) as pool:
        runs = list(pool.map(
            lambda i: server.complete(f"{index}-{i} " + words(30, i + 1), DECODE_TOKENS),
            range(8)))
    firsts = [t[0][0] for t in runs if t[0]]
    lasts = [t[0][-1] for t in runs if t[0]]
    tokens = sum(max(len(t[0]) - 1, 0) for t in runs)
    batch = tokens / (max(lasts) - min(firsts)) if firsts else float("nan")

    times, prompt_tokens, sent = server.complete(f"{index} " + words(PREFILL_WORDS, index), 1)
    prefill = (prompt_tokens or 0) / (times[0] - sent) if times else float("nan")
    return {"decode1": single, "decode8": batch, "prefill": prefill, "step_ms": step_ms}


def measure(name, command, port, model, env, passes, log):
    server = Server(name, command, port, model, env, log)
    try:
        server.wait_ready()
        loaded = tree_rss(server.process.pid)
        results = [one_pass(server, i) for i in range(passes)]
    finally:
        server.stop()
    row = {key: statistics.median(r[key] for r in results) for key in results[0]}
    row["loaded_mib"] = loaded / 2**20
    row["peak_mib"] = server.peak / 2**20
    return row


def corral_command(corral, models_dir, port, state):
    return [
        str(corral), "serve", "--host", "127.0.0.1", "--port", str(port),
        "--models-dir", str(models_dir), "--state-dir", str(state),
    ], {"HOME": str(state), "XDG_STATE_HOME": str(state), "XDG_CACHE_HOME": str(state)}


def mlx_command(python, directory, port):
    command = [str(python), "-m", "mlx_lm", "server", "--model", str(directory),
               "--host", "127.0.0.1", "--port", str(port)]
    env = {"LD_PRELOAD": OPENBLAS} if os.path.exists(OPENBLAS) else {}
    return command, {**env, "HF_HUB_OFFLINE": "1"}


def bench(label, directory, args, log_dir):
    rows = []
    models_dir = args.work / "served" / label
    models_dir.mkdir(parents=True, exist_ok=True)
    link = models_dir / label
    if not link.exists():
        link.symlink_to(directory)
    state = args.work / "state" / label
    state.mkdir(parents=True, exist_ok=True)
    servers = [("corral", *corral_command(args.corral, models_dir, free_port(), state))]
    if not args.no_peer:
        servers.append(("mlx_lm", *mlx_command(sys.executable, directory, free_port())))
    for name, command, env in servers:
        port = int(command[command.index("--port") + 1])
        model = label if name == "corral" else str(directory)
        try:
            row = measure(name, command, port, model, env, args.passes,
                          log_dir / f"{label}-{name}.log")
            rows.append((label, name, row))
        except Exception as error:  # one failing server or architecture must not end the run
            rows.append((label, name, {"error": str(error)[:80]}))
        print_row(*rows[-1], flush=True)
    return rows


HEADER = (f"| {'architecture':<24} | {'server':<7} | {'decode 1 tok/s':>14} | "
          f"{'decode 8 tok/s':>14} | {'prefill tok/s':>13} | {'loaded MiB':>10} | {'peak MiB':>8} |")


def print_row(label, name, row, flush=False):
    if "error" in row:
        print(f"| {label:<24} | {name:<7} | failed: {row['error']} |", flush=flush)
        return
    print(f"| {label:<24} | {name:<7} | {row['decode1']:>14.1f} | {row['decode8']:>14.1f} | "
          f"{row['prefill']:>13.1f} | {row['loaded_mib']:>10.0f} | {row['peak_mib']:>8.0f} |",
          flush=flush)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archs", help="comma-separated architectures (default: all)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--no-archs", action="store_true", help="only the expert sweep")
    parser.add_argument("--no-peer", action="store_true", help="corral only")
    parser.add_argument("--work", type=Path, default=Path("/tmp/corral-bench-architectures"))
    parser.add_argument("--corral", type=Path, default=ROOT / "target" / "release" / "corral")
    args = parser.parse_args()
    # A SIGTERM unwinds through each server's `finally`, so no server outlives the bench.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not args.corral.exists():
        sys.exit(f"{args.corral} missing: run `cargo xtask cargo build --release --bins`")
    args.work.mkdir(parents=True, exist_ok=True)
    log_dir = args.work / "logs"
    log_dir.mkdir(exist_ok=True)
    tokenizer_dir = args.work / "tokenizer"
    if not (tokenizer_dir / "tokenizer.json").exists():
        train_tokenizer(tokenizer_dir)
    specs = json.loads((ROOT / "scripts/reference/toolchain.json").read_text())["architectures"]
    chosen = args.archs.split(",") if args.archs else list(specs)

    rows = []
    print(f"medians of {args.passes} passes; hidden {HIDDEN}, {LAYERS} layers, vocab {VOCAB}, "
          f"f32; decode {DECODE_TOKENS} tokens, prefill ~{PREFILL_WORDS} words")
    print(HEADER)
    print("|" + "|".join("-" * (len(c)) for c in HEADER.split("|")[1:-1]) + "|")
    if not args.no_archs:
        for arch in chosen:
            spec = {**specs[arch], "config": scaled(specs[arch]["config"])}
            directory = args.work / "models" / arch
            try:
                directory = build_checkpoint(spec, directory, tokenizer_dir)
            except Exception as error:
                print_row(arch, "-", {"error": f"building: {error}"[:80]}, flush=True)
                continue
            rows += bench(arch, directory, args, log_dir)

    if args.no_sweep:
        return
    print()
    print("expert sweep: qwen3_moe, top 2 of N experts, Hugging Face layout (stacked at load)")
    print(HEADER)
    print("|" + "|".join("-" * (len(c)) for c in HEADER.split("|")[1:-1]) + "|")
    sweep = []
    for experts in [8, 32, 128]:
        spec = {**specs["qwen3_moe"], "config": scaled(specs["qwen3_moe"]["config"], experts, 2)}
        spec["config"]["mlp_only_layers"] = []
        label = f"qwen3_moe-{experts}e-hf"
        directory = args.work / "models" / label
        build_checkpoint(spec, directory, tokenizer_dir, hf_layout=True)
        sweep += bench(label, directory, args, log_dir)
    print()
    print("| experts | server  | decode step ms (1 sequence) | weights MiB |")
    print("|---------|---------|-----------------------------|-------------|")
    for label, name, row in sweep:
        size = sum(f.stat().st_size for f in (args.work / "models" / label).glob("*.safetensors"))
        experts = label.split("-")[1]
        step = f"{row['step_ms']:.2f}" if "step_ms" in row else "failed"
        print(f"| {experts:>7} | {name:<7} | {step:>27} | {size / 2**20:>11.0f} |")


if __name__ == "__main__":
    main()
