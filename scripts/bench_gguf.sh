#!/usr/bin/env bash
# A GGUF model against the same model as an MLX directory: load time, peak resident memory,
# prompt and decode tokens/s of `corral-worker generate` on the GGUF, `corral-worker generate` on
# the MLX directory and `mlx_lm.generate` on the MLX directory, on one prompt (chat template,
# greedy, the same token budget). Medians over PASSES passes; within a pass the runs are
# interleaved (and the order rotates from pass to pass), so a noisy machine slows every variant
# alike.
#
# Usage: scripts/bench_gguf.sh
#   GGUF=FILE        the model (default: the set-up's build/models/SmolLM2-135M-Instruct.Q4_1.gguf)
#   MAX_TOKENS=N     tokens to generate (default 128)
#   PASSES=N         passes (default 3)
#
# The MLX directory is made once, by scripts/gguf_to_mlx.py, into build/bench/<name>-mlx: the
# GGUF's own quantized bytes (SmolLM2: Q4_1 layers, a Q8_0 embedding), with the embedding's bits
# as a per-layer entry in config.json, as mlx_lm.convert writes mixed precision. A second
# directory, build/bench/<name>-mlx-4bit, has the embedding requantized to 4 bits, so that every
# layer has config.json's top-level quantization (a loader that reads only that one can load it);
# it is not the GGUF's bytes, and its answers may differ. Both directories run in both programs.
#
# Figures, the same way for every run:
#   load         corral-worker's own `load:` line; for mlx_lm, the time of mlx_lm's `load()`
#                (weights read and evaluated, tokenizer built), timed around the CLI's own call.
#   wall         the whole process (/usr/bin/time), Python's start and imports included.
#   peak RSS     maximum resident set size of the process (/usr/bin/time -v).
#   MLX peak     MLX's allocator peak as each program reports it (mlx_lm's "Peak memory", which
#                is in 10^9 bytes, converted to MiB).
#   prompt, decode tokens/s as each program prints them, except that mlx_lm's decode figure
#                counts N tokens over the N-1 steps after the first token: it is scaled by
#                (N-1)/N to be corral-worker's (N-1 tokens over the same time).
#   text         one letter per pass: equal letters, equal generated texts; A is corral-worker's
#                on the GGUF in the first pass.
# Load times are with the files in the page cache (they are read once before the first pass).
# Needs /usr/bin/time (GNU time). Makes a venv at build/bench/venv (mlx, mlx-lm, gguf from PyPI).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
gguf=${GGUF:-$root/build/models/SmolLM2-135M-Instruct.Q4_1.gguf}
max_tokens=${MAX_TOKENS:-128}
passes=${PASSES:-3}
prompt="Write a short story about a horse that escapes its corral at night and what it finds."
bench=$root/build/bench
venv=$bench/venv
python=$venv/bin/python
worker=$root/target/release/corral-worker
name=$(basename "$gguf" .gguf)
name=${name%%.Q*}
mlx_dir=$bench/$name-mlx
mlx_dir_4bit=$bench/$name-mlx-4bit

[[ -f $gguf ]] || { echo "no GGUF at $gguf (cargo xtask setup fetches SmolLM2)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "needs GNU time at /usr/bin/time" >&2; exit 1; }

cargo xtask cargo build --quiet --release -p corral-worker

# The venv: the MLX the project builds against (build/mlx/mlx-cpu-VERSION), mlx-lm as in
# scripts/reference/regenerate.sh, and gguf for the converter. Rebuilt when the pins change.
mlx_version=""
for unpacked in "$root"/build/mlx/mlx-cpu-*/; do
  if [[ -d $unpacked ]]; then mlx_version=$(basename "$unpacked" | sed 's/^mlx-cpu-//'); fi
done
[[ -n $mlx_version ]] || { echo "no build/mlx/mlx-cpu-*: run cargo xtask setup" >&2; exit 1; }
extra=""
[[ $(uname) == Linux ]] && extra="[cpu]"
pins="mlx${extra}==$mlx_version mlx-lm==0.32.2 gguf==0.19.0"
if [[ $(cat "$venv/corral-pins" 2>/dev/null) != "$pins" ]]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet $pins
  echo "$pins" >"$venv/corral-pins"
fi

# Converts once; again only when the GGUF or the converter is newer than the directory.
convert() {
  local out=$1
  shift
  if [[ ! -f $out/config.json || $gguf -nt $out/config.json ||
    $root/scripts/gguf_to_mlx.py -nt $out/config.json ]]; then
    rm -rf "$out"
    "$python" "$root/scripts/gguf_to_mlx.py" "$@" "$gguf" "$out"
  fi
}
convert "$mlx_dir"
convert "$mlx_dir_4bit" --uniform-bits 4

# mlx_lm.generate's own main(), with its call to load() timed.
mlx_lm_timed='
import importlib, sys, time
g = importlib.import_module("mlx_lm.generate")  # mlx_lm.generate is also a function
load = g.load
def timed(*args, **kwargs):
    start = time.perf_counter()
    result = load(*args, **kwargs)
    print(f"load: {time.perf_counter() - start:.2f} s", file=sys.stderr)
    return result
g.load = timed
sys.argv = ["mlx_lm.generate"] + sys.argv[1:]
g.main()
'

variants=(worker:gguf worker:mlx mlx_lm:mlx worker:mlx-4bit mlx_lm:mlx-4bit)
model_of() {
  case $1 in
  gguf) echo "$gguf" ;;
  mlx) echo "$mlx_dir" ;;
  mlx-4bit) echo "$mlx_dir_4bit" ;;
  esac
}

runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
cat "$gguf" "$mlx_dir"/* "$mlx_dir_4bit"/* >/dev/null

for ((pass = 0; pass < passes; pass++)); do
  for ((i = 0; i < ${#variants[@]}; i++)); do
    variant=${variants[(i + pass) % ${#variants[@]}]}
    program=${variant%%:*}
    model=$(model_of "${variant#*:}")
    run=$runs/$pass.${variant/:/.}
    echo "pass $((pass + 1))/$passes: $program on $model" >&2
    if [[ $program == worker ]]; then
      command=("$worker" generate --model "$model" --chat --prompt "$prompt"
        --max-tokens "$max_tokens")
    else
      command=("$python" -c "$mlx_lm_timed" --model "$model" --prompt "$prompt"
        --max-tokens "$max_tokens" --temp 0)
    fi
    /usr/bin/time -v -o "$run.time" "${command[@]}" >"$run.out" 2>"$run.err" || true
  done
done

python3 - "$runs" "$passes" "$max_tokens" "$gguf" "${variants[@]}" <<'PY'
import re, statistics, sys
from pathlib import Path

runs, passes, max_tokens, gguf = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
variants = sys.argv[5:]

def number(pattern, text):
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else None

def parse(pass_, variant):
    base = runs / f"{pass_}.{variant.replace(':', '.')}"
    out, err, time = (Path(f"{base}.{ext}").read_text() for ext in ("out", "err", "time"))
    status = number(r"Exit status: (\d+)", time)
    if status != 0:
        reason = (err.strip().splitlines() or ["no output"])[-1]
        return {"failed": reason}
    run = {
        "rss": number(r"Maximum resident set size \(kbytes\): (\d+)", time) / 1024,
        "load": number(r"^load: ([\d.]+) s", err),
    }
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", time).group(1)
    run["wall"] = sum(float(part) * 60**i for i, part in enumerate(reversed(wall.split(":"))))
    if variant.startswith("worker"):
        run["text"] = out.strip()
        run["prompt"] = number(r"^prompt: \d+ tokens, ([\d.]+) tokens/s", err)
        run["tokens"] = number(r"^decode: (\d+) tokens", err)
        run["decode"] = number(r"^decode: \d+ tokens, ([\d.]+) tokens/s", err)
        run["mlx_peak"] = number(r"^peak memory: [\d.]+ MiB resident, ([\d.]+) MiB MLX", err)
    else:
        parts = out.split("==========")
        run["text"] = parts[1].strip() if len(parts) >= 3 else None
        run["prompt"] = number(r"^Prompt: \d+ tokens, ([\d.]+) tokens-per-sec", out)
        tokens = number(r"^Generation: (\d+) tokens", out)
        rate = number(r"^Generation: \d+ tokens, ([\d.]+) tokens-per-sec", out)
        run["tokens"] = tokens
        run["decode"] = rate * (tokens - 1) / tokens if tokens and tokens > 1 else None
        peak = number(r"^Peak memory: ([\d.]+) GB", out)
        run["mlx_peak"] = peak * 1e9 / 2**20 if peak is not None else None
    return run

results = {v: [parse(p, v) for p in range(passes)] for v in variants}
# One letter per distinct generated text, "A" for corral-worker's on the GGUF in the first pass.
letters = {}
for v in ["worker:gguf"] + variants:
    for run in results[v]:
        if "failed" not in run and run["text"] not in letters:
            letters[run["text"]] = chr(ord("A") + len(letters))

labels = {
    "worker:gguf": "corral-worker, GGUF",
    "worker:mlx": "corral-worker, MLX dir",
    "mlx_lm:mlx": "mlx_lm.generate, MLX dir",
    "worker:mlx-4bit": "corral-worker, MLX dir 4-bit emb.",
    "mlx_lm:mlx-4bit": "mlx_lm.generate, MLX dir 4-bit emb.",
}
columns = [("load", "load s", "{:.2f}"), ("wall", "wall s", "{:.1f}"),
           ("rss", "peak RSS MiB", "{:.0f}"), ("mlx_peak", "MLX peak MiB", "{:.0f}"),
           ("prompt", "prompt tok/s", "{:.1f}"), ("decode", "decode tok/s", "{:.2f}"),
           ("tokens", "tokens", "{:.0f}")]
print(f"\n{gguf}, {max_tokens} max tokens, medians of {passes} passes; decode range: min-max "
      f"over the passes; text: a letter per pass, the same letter for the same text, A for "
      f"corral-worker's on the GGUF")
header = ["variant"] + [title for _, title, _ in columns] + ["decode range", "text"]
rows = []
for v in variants:
    ok = [r for r in results[v] if "failed" not in r]
    if not ok:
        rows.append([labels[v], "fails: " + results[v][0]["failed"]])
        continue
    row = [labels[v]]
    for key, _, form in columns:
        values = [r[key] for r in ok if r[key] is not None]
        row.append(form.format(statistics.median(values)) if values else "-")
    decodes = [r["decode"] for r in ok if r["decode"] is not None]
    row.append(f"{min(decodes):.2f}-{max(decodes):.2f}" if decodes else "-")
    row.append("".join(letters[r["text"]] if "failed" not in r else "-" for r in results[v]))
    rows.append(row)
widths = [max(len(str(r[i])) for r in [header] + rows if i < len(r) and len(r) > 2)
          for i in range(len(header))]
def line(cells):
    if len(cells) == 2:  # a failed variant: its reason across the table
        return f"| {cells[0]:<{widths[0]}} | {cells[1]}"
    return "| " + " | ".join(f"{c:<{w}}" for c, w in zip(cells, widths)) + " |"
print(line(header))
print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
for row in rows:
    print(line(row))
PY
