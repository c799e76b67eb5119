#!/usr/bin/env bash
# What GGUF files take in memory under `corral serve`: for each file, its size, its weights once
# loaded (`corral-worker describe`, the default `gguf_requantize`), admission's estimate before the
# start (`/admin/workers`' `estimate_bytes`) and the worker's footprint (`footprint_bytes`) once
# loaded and after one short chat, with the ratios the memory estimate is held to.
#
# Usage: scripts/gguf_memory.sh [FILE.gguf ...]
#   Without files: the set-up's SmolLM2-135M-Instruct Q4_K_M, Q5_K_M and Q6_K, and a larger
#   model, the peers' random-weight small-llama (197M parameters, ../shared/peers/setup.sh makes
#   /tmp/corral-peers/models/small-llama.f16.gguf) quantized to Q4_K_M once into build/bench/ by
#   the set-up's llama-quantize.
#   PROFILE=P   cargo profile of the binaries (default debug; build them first)
#   PORT=N      the port corral listens on (default 18941)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/${PROFILE:-debug}
port=${PORT:-18941}
quantize=$root/build/llama-quantize/build/bin/llama-quantize
files=("$@")
if ((${#files[@]} == 0)); then
  for recipe in Q4_K_M Q5_K_M Q6_K; do
    files+=("$root/build/models/SmolLM2-135M-Instruct.$recipe.gguf")
  done
  small=/tmp/corral-peers/models/small-llama.f16.gguf
  large=$root/build/bench/small-llama.Q4_K_M.gguf
  if [[ -f $small ]]; then
    mkdir -p "$root/build/bench"
    # The set-up builds llama-quantize with shared libraries beside it.
    [[ -f $large ]] || LD_LIBRARY_PATH=$(dirname "$quantize") \
      "$quantize" "$small" "$large" Q4_K_M >/dev/null
    files+=("$large")
  else
    echo "no $small (bash ../shared/peers/setup.sh makes it): SmolLM2 only" >&2
  fi
fi

work=$(mktemp -d)
server=""
cleanup() {
  [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/models" "$work/home" "$work/state"
for file in "${files[@]}"; do
  ln -s "$file" "$work/models/$(basename "$file")"
done
HOME=$work/home "$bin/corral" serve --port "$port" --models-dir "$work/models" \
  --state-dir "$work/state" 2>"$work/serve.log" &
server=$!
for _ in $(seq 60); do
  curl -sf "localhost:$port/health" >/dev/null && break
  sleep 1
done

row() {
  curl -s "localhost:$port/admin/workers" | python3 -c '
import json, sys
for row in json.load(sys.stdin)["data"]:
    if row["model"] == sys.argv[1]:
        print(row["estimate_bytes"] or 0, row["footprint_bytes"] or 0)' "$1"
}

echo "| file | file MiB | weights MiB | weights/file | estimate MiB | footprint loaded MiB | after a chat MiB | after a chat/estimate | after a chat/file |"
echo "|---|---|---|---|---|---|---|---|---|"
for file in "${files[@]}"; do
  id=$(basename "$file" .gguf)
  read -r estimate _ < <(row "$id")
  curl -s -X POST "localhost:$port/v1/models/$id/load" >/dev/null
  loaded=0
  for _ in $(seq 120); do
    read -r _ loaded < <(row "$id")
    [[ $(curl -s "localhost:$port/admin/workers" | python3 -c '
import json, sys
print([r["state"] for r in json.load(sys.stdin)["data"] if r["model"] == sys.argv[1]][0])' "$id") == ready ]] && break
    sleep 1
  done
  read -r _ loaded < <(row "$id")
  curl -s "localhost:$port/v1/chat/completions" -H 'content-type: application/json' \
    -d "{\"model\":\"$id\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are you?\"}],\"max_tokens\":8}" >/dev/null
  read -r _ footprint < <(row "$id")
  weights=$("$bin/corral-worker" describe "$file" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["gguf_loaded_bytes"]["8bit"])')
  size=$(stat -L -c %s "$file")
  python3 -c '
import sys
name, size, weights, estimate, loaded, footprint = sys.argv[1], *map(int, sys.argv[2:])
mib = lambda b: f"{b / 2**20:.1f}"
print(f"| {name} | {mib(size)} | {mib(weights)} | {weights / size:.3f} | {mib(estimate)} | "
      f"{mib(loaded)} | {mib(footprint)} | {footprint / estimate:.3f} | {footprint / size:.3f} |")' \
    "$id" "$size" "$weights" "$estimate" "$loaded" "$footprint"
  curl -s -X POST "localhost:$port/v1/models/$id/unload" >/dev/null
done
