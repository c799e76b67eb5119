#!/usr/bin/env bash
# corral-worker generate and mlx_lm.generate side by side on one model directory: prompt and
# decode tokens/s, and the peak resident memory of each process measured the same way
# (getrusage of the finished child). Greedy, chat template, same prompt and token budget.
#
# Usage: scripts/bench_generate.sh MODEL_DIR [MAX_TOKENS]
# Needs the reference venv of `cargo xtask reference` for mlx_lm (build/reference/venv).
set -euo pipefail

model=$1
max_tokens=${2:-128}
root=$(cd "$(dirname "$0")/.." && pwd)
python=$root/build/reference/venv/bin/python
prompt="Write a short story about a horse that escapes its corral at night and what it finds."

cargo xtask cargo build --quiet --release --bin corral-worker

# Runs a command, prints its stderr and its peak resident memory in MiB.
measure() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
if done.returncode != 0:
    sys.exit(f"{sys.argv[1]} failed:\n{done.stdout}{done.stderr}")
# corral-worker reports on stderr; mlx_lm on stdout after the text.
figures = ("load:", "prompt:", "decode:", "peak memory:", "Prompt:", "Generation:", "Peak memory:")
for line in (done.stdout + done.stderr).splitlines():
    if line.startswith(figures):
        print(line)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"peak resident memory: {peak:.1f} MiB")
PY
}

echo "== corral-worker generate (OpenBLAS linked)"
measure "$root/target/release/corral-worker" generate --model "$model" --chat \
  --prompt "$prompt" --max-tokens "$max_tokens"

echo "== mlx_lm.generate (wheel's reference BLAS)"
measure "$python" -m mlx_lm generate --model "$model" --prompt "$prompt" \
  --max-tokens "$max_tokens" --temp 0

openblas=/usr/lib/$(uname -m)-linux-gnu/openblas-pthread/libopenblas.so.0
if [[ -e $openblas ]]; then
  echo "== mlx_lm.generate (OpenBLAS preloaded)"
  LD_PRELOAD=$openblas measure "$python" -m mlx_lm generate --model "$model" \
    --prompt "$prompt" --max-tokens "$max_tokens" --temp 0
fi
