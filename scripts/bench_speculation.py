#!/usr/bin/env python3
"""Speculative decoding in corral beside its peers, greedy, each engine on the same files. Two
workloads, each asked to rewrite a file it was just given with one name changed (an agent's loop:
most of the answer is in the prompt; `variant` changes the name, so no two sequences share a
prompt):

1. Prompt lookup on the real SmolLM2-135M-Instruct (the set-up's Q4_1 GGUF), 256 tokens at most:
   corral `speculative = "ngram"` off and on; llama.cpp's own server (`llama-server` built from
   the source vendored in llama-cpp-python 0.3.36) off and with `--spec-type ngram-simple`
   (a 3-token lookup guessing the 4 tokens after it, as corral's does), both at 1 and 8 concurrent
   sequences; llama-cpp-python's `LlamaPromptLookupDecoding(num_pred_tokens=4)` on the same file,
   in-process, one sequence at a time (it has no batch). mlx-lm has no prompt lookup: no row.
2. A draft model: a random-weight target shaped like SmolLM2-360M (transformers' `LlamaConfig`:
   hidden 960, 32 layers, 15 heads, 5 KV heads, intermediate 2560, tied embeddings, seed 0) with
   SmolLM2's tokenizer, checked against SmolLM2-135M-Instruct as the draft (dequantized from the
   Q6_K GGUF by transformers), 4 guesses a pass; 64 tokens at most (`--draft-max-tokens`: mlx
   and corral decode this f32 target at about 7 tokens a second on 2 cores). Both are float32 safetensors (mlx's CPU backend
   computes float16 slowly; corral and llama.cpp take either), and llama.cpp's converter
   (`convert_hf_to_gguf.py --outtype f32`) makes f32 GGUFs of both, so every engine runs the same
   weights. Rows: corral `draft = "draft"` off and on at 1 and 8 sequences; mlx-lm
   `stream_generate(draft_model=..., num_draft_tokens=4)` in-process, one sequence (it batches no
   speculation); llama-server `-md` `--spec-type draft-simple --spec-draft-n-max 4` at 1 and 8.
   A random target's greedy tokens are not what a trained draft guesses, so acceptance is near
   nil: these rows show what failed guesses cost, not what good ones save.

Columns: decode tok/s per sequence = (tokens - 1) / (last streamed token - first), the median of
the sequences; all tok/s = the tokens of all sequences / the wall time from sending to the last
token (prefill included); both medians over `--passes`, after one warm-up request. Accepted = the
accepted guesses / the guesses checked over the timed passes: corral's
`corral_speculative_{draft,accepted}_tokens_total` metrics, llama-server's `timings`
(`draft_n`, `draft_n_accepted`), mlx-lm's tokens marked `from_draft` over the guesses its rounds
made (min(4, tokens left) each); llama-cpp-python reports none. Prints one markdown table; no
assertions. Everything listens on 127.0.0.1; the servers are killed and temporary folders removed
however a run ends.

Made once and kept (delete to remake): the models under build/bench-speculation/ (with
build/reference/hf-venv's transformers and torch; transformers reads GGUF through the `gguf`
package, here llama.cpp's vendored gguf-py declared to it by a stub dist-info, and without
`accelerate` through `load_gguf_checkpoint`; the tokenizer's pre-tokenizer is set to the GGUF's
`smollm` one, digits split, which transformers' GGUF reader leaves out), and llama-server in
`--llama-build` (CPU, Release; about 7 minutes on 2 cores). mlx runs with OpenBLAS preloaded.

Usage: python3 scripts/bench_speculation.py [--bin-dir target/debug] [--passes 3] [--port 18260]
       [--parts lookup,draft] [--engines corral,llama.cpp,llama-cpp-python,mlx-lm]
       [--draft-max-tokens 64] [--llama-build /tmp/llama-spec-build]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GGUF = ROOT / "build/models/SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_SOURCE = ROOT / "build/models/SmolLM2-135M-Instruct.Q6_K.gguf"
LLAMA_CPP = ROOT / "build/llama-quantize"
LLAMA_SOURCE = LLAMA_CPP / "llama_cpp_python-0.3.36/vendor/llama.cpp"
HF_PYTHON = ROOT / "build/reference/hf-venv/bin/python"
OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"
MODELS = ROOT / "build/bench-speculation"
MODEL = "SmolLM2-135M-Instruct"
MAX_TOKENS = 256
DRAFT_TOKENS = 4

FILE = """def add(a, b):
    \"\"\"Returns the sum of a and b.\"\"\"
    return a + b


def total(values):
    result = 0
    for value in values:
        result = add(result, value)
    return result


def mean(values):
    if not values:
        return 0
    return total(values) / len(values)


if __name__ == "__main__":
    numbers = [1, 2, 3, 4, 5]
    print(total(numbers))
    print(mean(numbers))
"""


def messages(variant: int):
    """The agent's turn; `variant` changes one word, so that no two sequences share a prompt."""
    names = ["plus", "combine", "join", "merge", "sum_of", "accumulate", "gather", "collect"]
    name = names[variant % len(names)]
    return [{"role": "user", "content": (
        f"Here is calc.py:\n```python\n{FILE}```\nRewrite calc.py with the function `add` "
        f"renamed to `{name}`. Output the whole file in a code block."
    )}]


# The models, made by transformers in build/reference/hf-venv: argv = the draft's GGUF, the draft's
# and the target's folders, the seed. Each is written beside its place and renamed into it.
PREPARE = r'''
import json, os, shutil, sys
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaConfig
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
source, draft, target, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
folder, name = os.path.split(source)
tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)

def save(model, out):
    partial = out + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    # The GGUF says `tokenizer.ggml.pre = smollm` (digits one by one, then GPT-2's byte-level
    # split); transformers' GGUF reader writes only the byte-level part.
    path = os.path.join(partial, "tokenizer.json")
    with open(path) as f:
        spec = json.load(f)
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    with open(path, "w") as f:
        json.dump(spec, f, ensure_ascii=False)
    os.rename(partial, out)

if not os.path.isdir(draft):
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(source, return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()}, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise SystemExit(f"draft: missing {missing}, unexpected {unexpected}")
    save(model, draft)
if not os.path.isdir(target):
    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=960, num_hidden_layers=32, num_attention_heads=15,
                         num_key_value_heads=5, head_dim=64, intermediate_size=2560, vocab_size=49152,
                         tie_word_embeddings=True, max_position_embeddings=8192, rms_norm_eps=1e-5,
                         rope_parameters={"rope_theta": 100000.0, "rope_type": "default"},
                         bos_token_id=1, eos_token_id=2, pad_token_id=2)
    save(AutoModelForCausalLM.from_config(config, dtype=torch.float32), target)
'''


def prepare_models():
    """The draft's and the target's folders and f32 GGUFs under build/bench-speculation/."""
    MODELS.mkdir(parents=True, exist_ok=True)
    draft, target = MODELS / "draft", MODELS / "target"
    ggufs = {folder: MODELS / f"{folder.name}.f32.gguf" for folder in (draft, target)}
    if all(path.exists() for path in [draft, target, *ggufs.values()]):
        return draft, target, ggufs[draft], ggufs[target]
    started = time.perf_counter()
    # transformers asks the `gguf` distribution's version; llama.cpp's gguf-py has no dist-info.
    stub = MODELS / "pylib"
    (stub / "gguf-0.19.0.dist-info").mkdir(parents=True, exist_ok=True)
    (stub / "gguf-0.19.0.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: gguf\nVersion: 0.19.0\n")
    if not (stub / "gguf").exists():
        (stub / "gguf").symlink_to(LLAMA_SOURCE / "gguf-py/gguf")
    env = dict(os.environ, PYTHONPATH=str(stub), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    subprocess.run([str(HF_PYTHON), "-c", PREPARE, str(DRAFT_SOURCE), str(draft), str(target), "0"],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    for folder, gguf in ggufs.items():
        if not gguf.exists():
            partial = gguf.with_suffix(".partial")
            subprocess.run([str(HF_PYTHON), str(LLAMA_SOURCE / "convert_hf_to_gguf.py"), str(folder),
                            "--outtype", "f32", "--outfile", str(partial)],
                           env=dict(os.environ, HF_HUB_OFFLINE="1"), check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            partial.rename(gguf)
    print(f"models made in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return draft, target, ggufs[draft], ggufs[target]


def llama_server(build: Path) -> Path:
    """llama-server from the vendored llama.cpp, built once in `build` (CPU only, Release)."""
    binary = build / "bin/llama-server"
    if binary.exists():
        return binary
    started = time.perf_counter()
    build.mkdir(parents=True, exist_ok=True)
    with open(build / "build.log", "w") as log:
        subprocess.run(["cmake", "-S", str(LLAMA_SOURCE), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                        "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=ON",
                        "-DLLAMA_OPENSSL=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF"],
                       check=True, stdout=log, stderr=subprocess.STDOUT)
        subprocess.run(["cmake", "--build", str(build), "--config", "Release", "-j2", "--target", "llama-server"],
                       check=True, stdout=log, stderr=subprocess.STDOUT)
    print(f"llama-server built in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return binary


@contextmanager
def server(command, base: str, health: str, env=None, timeout=300):
    """Runs `command` in its own process group until `base + health` answers; kills the group after."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{base}{health}", timeout=2)
                break
            except OSError:
                if time.time() > deadline or process.poll() is not None:
                    raise SystemExit(f"{command[0]} did not start")
                time.sleep(0.3)
        yield
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass


def stream_chat(base: str, model: str, variant: int, max_tokens: int):
    """One streamed chat completion: (completion tokens, seconds from first to last delta, guesses
    checked, accepted) — the last two where the answer says them (llama-server's `timings`)."""
    body = {"model": model, "messages": messages(variant), "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    request = urllib.request.Request(f"{base}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    first = last = None
    tokens = drafted = accepted = 0
    with urllib.request.urlopen(request, timeout=900) as response:
        for line in response:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            if event.get("timings"):
                drafted = event["timings"].get("draft_n", 0)
                accepted = event["timings"].get("draft_n_accepted", 0)
            if event.get("choices") and event["choices"][0]["delta"].get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
    return tokens, (last - first) if first and last else 0.0, drafted, accepted


def concurrent(run, count):
    """`count` sequences at once: the median sequence's decode tok/s, all their tokens over the
    wall, and their guesses checked and accepted."""
    results = [None] * count
    started = time.perf_counter()
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, run(i))) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    per_sequence = [(r[0] - 1) / r[1] for r in results if r[1] > 0]
    return (statistics.median(per_sequence) if per_sequence else 0.0, sum(r[0] for r in results) / wall,
            sum(r[2] for r in results), sum(r[3] for r in results))


def passes_of(run, counts, passes, guesses=None):
    """count → (decode tok/s per sequence, all tok/s, accepted share or None), medians over the
    passes; `guesses()` reads (checked, accepted) counters where the server keeps them instead."""
    rows = {}
    for count in counts:
        before = guesses() if guesses else (0, 0)
        runs = [concurrent(lambda i: run(i + p * count + 1), count) for p in range(passes)]
        after = guesses() if guesses else (sum(r[2] for r in runs), sum(r[3] for r in runs))
        drafted, accepted = after[0] - before[0], after[1] - before[1]
        rows[count] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
                       (accepted, drafted) if drafted else None)
    return rows


def metric(base: str, name: str, model: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f'{name}{{model="{model}"}} '):
                return float(line.split()[-1])
    return 0.0


def bench_corral(bin_dir: str, port: int, config: str, model: str, passes: int, max_tokens: int,
                 models: dict | None = None):
    """corral serving `model` (the Q4_1 GGUF as its default model, or `models`: id → folder)."""
    work = Path(tempfile.mkdtemp(prefix="corral-bench-spec-"))
    try:
        (work / "corral.toml").write_text(config)
        command = [f"{bin_dir}/corral", "serve", "--host", "127.0.0.1", "--port", str(port),
                   "--state-dir", str(work / "state"), "--config", str(work / "corral.toml")]
        env = dict(os.environ)
        if models:
            (work / "models").mkdir()
            for name, folder in models.items():
                (work / "models" / name).symlink_to(folder)
            command += ["--models-dir", str(work / "models")]
        else:
            env["CORRAL_DEFAULT_MODEL"] = str(GGUF)
        base = f"http://127.0.0.1:{port}"
        with server(command, base, "/health", env=env):
            stream_chat(base, model, 0, max_tokens)
            guesses = lambda: (metric(base, "corral_speculative_draft_tokens_total", model),
                               metric(base, "corral_speculative_accepted_tokens_total", model))
            return passes_of(lambda i: stream_chat(base, model, i, max_tokens), (1, 8), passes, guesses)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_llama_server(binary: Path, port: int, model: Path, extra, passes: int, max_tokens: int):
    """llama-server with 8 slots (each 2048 tokens of context), 2 threads, `extra` flags."""
    base = f"http://127.0.0.1:{port}"
    command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "16384",
               "-np", "8", "-t", "2", "-tb", "2", "--no-webui", *extra]
    with server(command, base, "/health"):
        stream_chat(base, "model", 0, max_tokens)
        return passes_of(lambda i: stream_chat(base, "model", i, max_tokens), (1, 8), passes)


LLAMA_CPP_RUN = """
import json, statistics, sys, time
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
lookup, passes, prompts = sys.argv[2] == "1", int(sys.argv[3]), json.loads(sys.argv[4])
llm = Llama(model_path=sys.argv[1], n_ctx=2048, n_threads=2, n_threads_batch=2, verbose=False,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=4) if lookup else None)
def one(messages):
    started = time.perf_counter()
    first = last = None
    tokens = 0
    for chunk in llm.create_chat_completion(messages=messages, max_tokens=%d, temperature=0, stream=True):
        if chunk["choices"][0]["delta"].get("content"):
            now = time.perf_counter(); first = first or now; last = now; tokens += 1
    return (tokens - 1) / (last - first), tokens / (last - started)
one(prompts[0])
runs = [one(prompts[1 + p]) for p in range(passes)]
print(json.dumps([statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)]))
""" % MAX_TOKENS


def bench_llama_cpp(lookup: bool, passes: int):
    env = dict(os.environ, PYTHONPATH=str(LLAMA_CPP / "llama_cpp_python-0.3.36"),
               LLAMA_CPP_LIB_PATH=str(LLAMA_CPP / "build/bin"))
    prompts = json.dumps([messages(i) for i in range(passes + 1)])
    python = ROOT / "build/reference/llama-cpp-venv/bin/python"
    out = subprocess.run([str(python), "-c", LLAMA_CPP_RUN, str(GGUF), "1" if lookup else "0",
                          str(passes), prompts], env=env, check=True, capture_output=True, text=True)
    one, total = json.loads(out.stdout.splitlines()[-1])
    return {1: (one, total, None)}


# mlx-lm in-process: argv = target, draft ("" for none), passes, max tokens, guesses a round,
# prompts. A speculative round yields its accepted guesses (`from_draft`) then the target's token.
MLX_RUN = r"""
import json, statistics, sys, time
from mlx_lm import load
from mlx_lm.generate import stream_generate
target, draft, passes, max_tokens, guesses = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
prompts = json.loads(sys.argv[6])
model, tokenizer = load(target)
draft_model = load(draft)[0] if draft else None
extra = {"draft_model": draft_model, "num_draft_tokens": guesses} if draft_model else {}
def one(messages):
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    started = time.perf_counter()
    first = last = None
    tokens = drafted = accepted = round_start = 0
    for response in stream_generate(model, tokenizer, prompt, max_tokens=max_tokens, **extra):
        now = time.perf_counter(); first = first or now; last = now; tokens += 1
        if response.from_draft:
            accepted += 1
        elif draft_model is not None:
            drafted += min(max_tokens - round_start, guesses); round_start = tokens
    if draft_model is not None and round_start < tokens:
        drafted += min(max_tokens - round_start, guesses)
    return (tokens - 1) / (last - first), tokens / (last - started), drafted, accepted
one(prompts[0])
runs = [one(prompts[1 + p]) for p in range(passes)]
print(json.dumps([statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
                  sum(r[2] for r in runs), sum(r[3] for r in runs)]))
"""


def bench_mlx(target: Path, draft: Path | None, passes: int, max_tokens: int):
    env = dict(os.environ, LD_PRELOAD=OPENBLAS, HF_HUB_OFFLINE="1")
    prompts = json.dumps([messages(i) for i in range(passes + 1)])
    out = subprocess.run([str(HF_PYTHON), "-c", MLX_RUN, str(target), str(draft or ""), str(passes),
                          str(max_tokens), str(DRAFT_TOKENS), prompts],
                         env=env, check=True, capture_output=True, text=True)
    one, total, drafted, accepted = json.loads(out.stdout.splitlines()[-1])
    return {1: (one, total, (accepted, drafted) if drafted else None)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", default=str(ROOT / "target/debug"))
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--port", type=int, default=18260, help="the first of the ports the servers take in turn")
    parser.add_argument("--parts", default="lookup,draft", help="which workloads: lookup, draft or both")
    parser.add_argument("--engines", default="corral,llama.cpp,llama-cpp-python,mlx-lm",
                        help="which engines' rows (comma-separated)")
    parser.add_argument("--draft-max-tokens", type=int, default=64, help="tokens at most, draft-model rows")
    parser.add_argument("--llama-build", default="/tmp/llama-spec-build", help="where llama-server is built")
    args = parser.parse_args()
    parts, engines = set(args.parts.split(",")), set(args.engines.split(","))
    ports = iter(range(args.port, args.port + 100))
    rows = []

    def add(engine, model, method, results, seconds):
        for count, (one, total, guesses) in sorted(results.items()):
            rate = f"{guesses[0] / guesses[1]:.0%} ({guesses[0]:.0f}/{guesses[1]:.0f})" if guesses else ""
            rows.append((engine, model, method, count, one, total, rate))
            print(rows[-1], f"{seconds:.0f} s", flush=True)

    def timed(run):
        started = time.perf_counter()
        results = run()
        return results, time.perf_counter() - started

    binary = llama_server(Path(args.llama_build)) if "llama.cpp" in engines else None
    lookup_model = "SmolLM2-135M Q4_1"
    if "lookup" in parts:
        for speculative in (False, True) if "corral" in engines else ():
            config = f'[models."{MODEL}"]\nspeculative = "ngram"\n' if speculative else ""
            results, seconds = timed(lambda: bench_corral(args.bin_dir, next(ports), config, MODEL,
                                                          args.passes, MAX_TOKENS))
            add("corral", lookup_model, "ngram" if speculative else "off", results, seconds)
        for speculative in (False, True) if binary else ():
            extra = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                     "--spec-ngram-simple-size-m", str(DRAFT_TOKENS)] if speculative else []
            results, seconds = timed(lambda: bench_llama_server(binary, next(ports), GGUF, extra,
                                                                args.passes, MAX_TOKENS))
            add("llama.cpp server", lookup_model, "ngram-simple" if speculative else "off", results, seconds)
        for lookup in (False, True) if "llama-cpp-python" in engines else ():
            results, seconds = timed(lambda: bench_llama_cpp(lookup, args.passes))
            add("llama-cpp-python", lookup_model, "prompt lookup" if lookup else "off", results, seconds)
    if "draft" in parts:
        draft, target, draft_gguf, target_gguf = prepare_models()
        target_model = "random 360M f32 + 135M f32 draft"
        models = {"target": target, "draft": draft}
        for speculative in (False, True) if "corral" in engines else ():
            config = '[models.target]\ndraft = "draft"\n' if speculative else ""
            results, seconds = timed(lambda: bench_corral(args.bin_dir, next(ports), config, "target",
                                                          args.passes, args.draft_max_tokens, models))
            add("corral", target_model, "draft" if speculative else "off", results, seconds)
        for speculative in (False, True) if "mlx-lm" in engines else ():
            results, seconds = timed(lambda: bench_mlx(target, draft if speculative else None,
                                                       args.passes, args.draft_max_tokens))
            add("mlx-lm", target_model, "draft" if speculative else "off", results, seconds)
        for speculative in (False, True) if binary else ():
            extra = ["-md", str(draft_gguf), "--spec-type", "draft-simple",
                     "--spec-draft-n-max", str(DRAFT_TOKENS)] if speculative else []
            results, seconds = timed(lambda: bench_llama_server(binary, next(ports), target_gguf, extra,
                                                                args.passes, args.draft_max_tokens))
            add("llama.cpp server", target_model, "draft-simple" if speculative else "off", results, seconds)
    print(f"\nRewriting a 22-line file, greedy, medians of {args.passes} passes; {MAX_TOKENS} tokens at most "
          f"(SmolLM2 rows), {args.draft_max_tokens} (draft-model rows); {DRAFT_TOKENS} guesses a pass\n")
    print("| engine | model | speculation | sequences | decode tok/s per sequence | all, tok/s | accepted |")
    print("|---|---|---|---|---|---|---|")
    for engine, model, method, count, one, total, rate in rows:
        print(f"| {engine} | {model} | {method} | {count} | {one:.1f} | {total:.1f} | {rate} |")


if __name__ == "__main__":
    main()
