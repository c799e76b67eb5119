#!/usr/bin/env python3
"""Prompt lookup (`speculative = "ngram"`) on the real SmolLM2-135M-Instruct (the set-up's Q4_1
GGUF) in an agent's loop: the model is asked to rewrite a file it was just given with one name
changed, so most of its answer is in its prompt. Decode tok/s per sequence and in all, at 1 and
8 concurrent sequences, with speculation off and on, for corral and for llama.cpp's prompt lookup
(llama-cpp-python 0.3.36's `LlamaPromptLookupDecoding` on the same file, in-process, one
sequence at a time: it has no batch); corral's acceptance rate from its metrics. Prints one
markdown table of medians; no assertions. Greedy, 256 tokens at most.

mlx-lm has no prompt lookup (its speculative decoding takes a draft model, and SmolLM2-135M is
the family's smallest), so it has no row.

Usage: python3 scripts/bench_speculation.py [--bin-dir target/debug] [--passes 3] [--port 18260]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GGUF = ROOT / "build/models/SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMA_CPP = ROOT / "build/llama-quantize"
MODEL = "SmolLM2-135M-Instruct"
MAX_TOKENS = 256

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


def stream_corral(base: str, variant: int):
    """One streamed chat completion: (completion tokens, seconds from first to last delta)."""
    body = {"model": MODEL, "messages": messages(variant), "max_tokens": MAX_TOKENS,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    request = urllib.request.Request(f"{base}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    first = last = None
    tokens = 0
    with urllib.request.urlopen(request, timeout=600) as response:
        for line in response:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            if event.get("choices") and event["choices"][0]["delta"].get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
    return tokens, (last - first) if first and last else 0.0


def concurrent(run, count):
    """`count` sequences at once: each one's decode tok/s, and all their tokens over the wall."""
    results = [None] * count
    started = time.perf_counter()
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, run(i))) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    per_sequence = [(tokens - 1) / seconds for tokens, seconds in results if seconds > 0]
    return statistics.median(per_sequence), sum(tokens for tokens, _ in results) / wall


def metric(base: str, name: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f'{name}{{model="{MODEL}"}} '):
                return float(line.split()[-1])
    return 0.0


def bench_corral(bin_dir: str, port: int, speculative: bool, passes: int):
    work = Path(tempfile.mkdtemp(prefix="corral-bench-spec-"))
    config = work / "corral.toml"
    config.write_text(f'[models."{MODEL}"]\nspeculative = "ngram"\n' if speculative else "")
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [f"{bin_dir}/corral", "serve", "--port", str(port), "--state-dir", str(work / "state"),
         "--config", str(config)],
        env=dict(os.environ, CORRAL_DEFAULT_MODEL=str(GGUF)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                if time.time() > deadline or process.poll() is not None:
                    raise SystemExit("corral did not start")
                time.sleep(0.3)
        stream_corral(base, 0)
        rows = {}
        for count in (1, 8):
            runs = [concurrent(lambda i: stream_corral(base, i + p), count) for p in range(passes)]
            rows[count] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
        drafted = metric(base, "corral_speculative_draft_tokens_total")
        accepted = metric(base, "corral_speculative_accepted_tokens_total")
        return rows, (accepted / drafted if drafted else None)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


LLAMA_CPP_RUN = """
import json, statistics, sys, time
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
lookup, passes, prompts = sys.argv[2] == "1", int(sys.argv[3]), json.loads(sys.argv[4])
llm = Llama(model_path=sys.argv[1], n_ctx=2048, n_threads=2, n_threads_batch=2, verbose=False,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=4) if lookup else None)
def one(messages):
    first = last = None
    tokens = 0
    for chunk in llm.create_chat_completion(messages=messages, max_tokens=%d, temperature=0, stream=True):
        if chunk["choices"][0]["delta"].get("content"):
            now = time.perf_counter(); first = first or now; last = now; tokens += 1
    return (tokens - 1) / (last - first)
one(prompts[0])
print(statistics.median(one(prompts[1 + p]) for p in range(passes)))
""" % MAX_TOKENS


def bench_llama_cpp(lookup: bool, passes: int):
    env = dict(os.environ, PYTHONPATH=str(LLAMA_CPP / "llama_cpp_python-0.3.36"),
               LLAMA_CPP_LIB_PATH=str(LLAMA_CPP / "build/bin"))
    prompts = json.dumps([messages(i) for i in range(passes + 1)])
    python = ROOT / "build/reference/llama-cpp-venv/bin/python"
    out = subprocess.run([str(python), "-c", LLAMA_CPP_RUN, str(GGUF), "1" if lookup else "0",
                          str(passes), prompts], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.split()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", default=str(ROOT / "target/debug"))
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--port", type=int, default=18260)
    args = parser.parse_args()
    rows = []
    for speculative in (False, True):
        results, acceptance = bench_corral(args.bin_dir, args.port, speculative, args.passes)
        label = "corral, ngram" if speculative else "corral, off"
        rate = f"{acceptance:.0%}" if acceptance is not None else ""
        rows.append((label, results[1][0], results[8][0], results[8][1], rate))
        print(rows[-1], flush=True)
    for lookup in (False, True):
        speed = bench_llama_cpp(lookup, args.passes)
        rows.append(("llama.cpp, prompt lookup" if lookup else "llama.cpp, off", speed, None, None, ""))
        print(rows[-1], flush=True)
    print(f"\nSmolLM2-135M-Instruct Q4_1, rewriting a 22-line file, greedy, medians of {args.passes} passes\n")
    print("| server, speculation | decode tok/s, 1 sequence | per sequence, 8 at once | all 8, tok/s | accepted |")
    print("|---|---|---|---|---|")
    for label, one, eight, total, rate in rows:
        cell = lambda value: f"{value:.1f}" if value is not None else "n/a"
        print(f"| {label} | {cell(one)} | {cell(eight)} | {cell(total)} | {rate} |")


if __name__ == "__main__":
    main()
