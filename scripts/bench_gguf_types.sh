#!/usr/bin/env bash
# corral beside llama.cpp on the same GGUF files, one per tensor type people download: SmolLM2-
# 135M-Instruct as Q4_0, Q4_1, Q8_0, Q4_K_M, Q5_K_M and Q6_K, and corral on the same model as an
# MLX 4-bit safetensors directory. For each: load time, peak resident memory, prompt and decode
# tokens/s of `corral-worker generate` and of llama.cpp (llama-cpp-python 0.3.36, in process, so
# that neither side pays for HTTP), on one prompt (chat template, greedy, the same token budget).
# Medians over PASSES passes; within a pass the runs are interleaved, so a busy machine slows both
# sides alike: read the ratios.
#
# Usage: scripts/bench_gguf_types.sh
#   MAX_TOKENS=N     tokens to generate (default 128)
#   PASSES=N         passes (default 3)
#   PROFILE=P        corral-worker's cargo profile: release (default, built here) or debug
#   LLAMA_PYTHON=P   a Python with llama-cpp-python (default: the peers' venv-llama, which
#                    `WITH_LLAMACPP=1 bash ../shared/peers/setup.sh` makes in /tmp/corral-peers)
#   MLX_PYTHON=P     a Python with mlx, mlx-lm, gguf and tokenizers for scripts/gguf_to_mlx.py
#                    (default: the peers' venv)
#
# The Q4_1, Q4_K_M, Q5_K_M and Q6_K files are the set-up's (`cargo xtask setup`); Q4_0 and Q8_0
# are made once into build/bench/ by the set-up's llama-quantize from the Q4_1 file (as the others
# are). The MLX 4-bit directory is the Q4_1 file's bytes with its Q8_0 embedding requantized to 4
# bits (`gguf_to_mlx.py --uniform-bits 4`: f16 scales, as MLX's own 4-bit models have them), made
# once into build/bench/. llama.cpp runs with as many threads as there are cores, as corral-worker
# uses.
#
# Figures: load is each program's own (corral-worker's `load:` line; the time of llama.cpp's
# `Llama()` constructor); peak RSS is /usr/bin/time's maximum resident set size of the whole
# process; prompt and decode tokens/s are timed by each program around the same work (llama.cpp:
# one eval of the prompt, then one eval per generated token, N-1 steps for N tokens, as corral's).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
models=$root/build/models
bench=$root/build/bench
max_tokens=${MAX_TOKENS:-128}
passes=${PASSES:-3}
prompt="Write a short story about a horse that escapes its corral at night and what it finds."
profile=${PROFILE:-release}
worker=$root/target/$profile/corral-worker
quantize=$root/build/llama-quantize/build/bin/llama-quantize
python=${LLAMA_PYTHON:-/tmp/corral-peers/venv-llama/bin/python}
mlx_python=${MLX_PYTHON:-/tmp/corral-peers/venv/bin/python}
source=$models/SmolLM2-135M-Instruct.Q4_1.gguf
mlx_4bit=$bench/SmolLM2-135M-Instruct-mlx-4bit

[[ -x /usr/bin/time ]] || { echo "needs GNU time at /usr/bin/time" >&2; exit 1; }
[[ -x $quantize && -f $source ]] || { echo "run cargo xtask setup first" >&2; exit 1; }
[[ -x $mlx_python ]] || { echo "no $mlx_python: run bash ../shared/peers/setup.sh" >&2; exit 1; }
llama=llama.cpp
if ! "$python" -c "import llama_cpp" 2>/dev/null; then
  echo "no llama-cpp-python in $python (WITH_LLAMACPP=1 bash ../shared/peers/setup.sh): corral alone" >&2
  llama=""
fi
if [[ $profile == release ]]; then
  cargo xtask cargo build --quiet --release -p corral-worker
else
  cargo xtask cargo build --quiet -p corral-worker
fi

mkdir -p "$bench"
files=()
for type in Q4_0 Q4_1 Q8_0 Q4_K_M Q5_K_M Q6_K; do
  file=$models/SmolLM2-135M-Instruct.$type.gguf
  if [[ ! -f $file ]]; then
    file=$bench/SmolLM2-135M-Instruct.$type.gguf
    # The set-up builds llama-quantize with shared libraries beside it.
    [[ -f $file ]] || LD_LIBRARY_PATH=$(dirname "$quantize") \
      "$quantize" --allow-requantize "$source" "$file" "$type" >/dev/null
  fi
  files+=("$file")
done
if [[ ! -f $mlx_4bit/config.json ]]; then
  "$mlx_python" "$root/scripts/gguf_to_mlx.py" --uniform-bits 4 "$source" "$mlx_4bit"
fi

# llama.cpp's side: the chat template from the GGUF (llama-cpp-python's own formatter), then a
# greedy loop timed as corral-worker times its own.
llama_cpp='
import os, sys, time
import numpy as np
from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
path, prompt, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
start = time.perf_counter()
llm = Llama(model_path=path, n_ctx=1024, n_threads=os.cpu_count(), verbose=False, seed=0)
print(f"load: {time.perf_counter() - start:.3f} s", file=sys.stderr)
template = llm.metadata["tokenizer.chat_template"]
eos = llm.token_eos()
formatter = Jinja2ChatFormatter(template, llm.detokenize([eos]).decode(), llm.detokenize([llm.token_bos()]).decode())
text = formatter(messages=[{"role": "user", "content": prompt}]).prompt
ids = llm.tokenize(text.encode(), add_bos=False, special=True)
# Without logits_all (which would compute the vocabulary projection at every prompt position),
# llama.cpp keeps the logits of the last position alone, in its context.
last = lambda: int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))))
start = time.perf_counter()
llm.eval(ids)
token = last()
prompt_s = time.perf_counter() - start
out = [token]
start = time.perf_counter()
while len(out) < max_tokens and token != eos:
    llm.eval([token])
    token = last()
    out.append(token)
decode_s = time.perf_counter() - start
if out[-1] == eos:
    out.pop()
print(llm.detokenize(out).decode(errors="replace"))
print(f"prompt: {len(ids)} tokens, {len(ids) / prompt_s:.1f} tokens/s", file=sys.stderr)
print(f"decode: {len(out)} tokens, {(len(out) - 1) / decode_s:.2f} tokens/s", file=sys.stderr)
'

runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
cat "${files[@]}" "$mlx_4bit"/*.safetensors >/dev/null
for ((pass = 0; pass < passes; pass++)); do
  for file in "${files[@]}" "$mlx_4bit"; do
    type=$(basename "$file" .gguf)
    type=${type##*.}
    programs=(corral $llama)
    [[ -d $file ]] && { type=MLX-4bit; programs=(corral); }
    for program in "${programs[@]}"; do
      run=$runs/$pass.$type.$program
      echo "pass $((pass + 1))/$passes: $program on $type" >&2
      if [[ $program == corral ]]; then
        command=("$worker" generate --model "$file" --chat --prompt "$prompt"
          --max-tokens "$max_tokens")
      else
        command=("$python" -c "$llama_cpp" "$file" "$prompt" "$max_tokens")
      fi
      /usr/bin/time -v -o "$run.time" "${command[@]}" >"$run.out" 2>"$run.err" || true
    done
  done
done

LLAMA_RAN=$llama python3 - "$runs" "$passes" "$max_tokens" "${files[@]}" "$mlx_4bit" <<'PY'
import os, re, statistics, sys
from pathlib import Path

runs, passes, max_tokens = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
files = [Path(f) for f in sys.argv[4:]]

def number(pattern, text):
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else None

def parse(base):
    if not Path(f"{base}.time").exists():
        return None
    err, time = Path(f"{base}.err").read_text(), Path(f"{base}.time").read_text()
    if number(r"Exit status: (\d+)", time) != 0:
        return None
    return {
        "load": number(r"^load: ([\d.]+) s", err),
        "rss": number(r"Maximum resident set size \(kbytes\): (\d+)", time) / 1024,
        "prompt": number(r"^prompt: \d+ tokens, ([\d.]+) tokens/s", err),
        "decode": number(r"^decode: \d+ tokens, ([\d.]+) tokens/s", err),
        "text": Path(f"{base}.out").read_text().strip(),
    }

def median(runs, key):
    values = [r[key] for r in runs if r and r[key] is not None]
    return statistics.median(values) if values else None

print(f"\nSmolLM2-135M-Instruct, {max_tokens} max tokens, medians of {passes} passes; "
      f"ratio = corral / llama.cpp; same text: whether the two answers were equal in every pass")
header = ["type", "file MiB", "load s c/l", "peak RSS MiB c/l", "prompt tok/s c/l",
          "decode tok/s c/l", "decode ratio", "same text"]
rows = []
def size(path):
    paths = path.glob("*.safetensors") if path.is_dir() else [path]
    return sum(os.path.getsize(p) for p in paths)

for file in files:
    type_ = "MLX-4bit" if file.is_dir() else file.stem.split(".")[-1]
    corral = [parse(runs / f"{p}.{type_}.corral") for p in range(passes)]
    llama = [parse(runs / f"{p}.{type_}.llama.cpp") for p in range(passes)]
    # llama.cpp runs GGUF files only, and only where llama-cpp-python was found.
    compared = not file.is_dir() and os.environ.get("LLAMA_RAN") == "llama.cpp"
    def pair(key, form):
        a, b = median(corral, key), median(llama, key)
        show = lambda v, none: none if v is None else form.format(v)
        return f"{show(a, 'fails')} / {show(b, 'fails' if compared else '-')}"
    a, b = median(corral, "decode"), median(llama, "decode")
    same = "-" if not compared else (
        "yes" if all(c and l and c["text"] == l["text"] for c, l in zip(corral, llama)) else "no")
    rows.append([type_, f"{size(file) / 2**20:.0f}", pair("load", "{:.2f}"),
                 pair("rss", "{:.0f}"), pair("prompt", "{:.0f}"), pair("decode", "{:.1f}"),
                 f"{a / b:.2f}" if a and b else "-", same])
widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
line = lambda cells: "| " + " | ".join(f"{c:<{w}}" for c, w in zip(cells, widths)) + " |"
print(line(header))
print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
for row in rows:
    print(line(row))
PY
