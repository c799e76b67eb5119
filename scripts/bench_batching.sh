#!/usr/bin/env bash
# Concurrent-request throughput of corral against peer servers, on the same random-weight f32
# Llama models: for each model, back to back, four servers with the same load configs:
#   corral            `corral serve` at its default [batching] max_sequences
#   corral-seq1       `corral serve --config` with `[batching] max_sequences = 1` (no batching)
#   mlx_lm            mlx_lm.server (OpenBLAS preloaded)
#   vllm-mlx          vllm-mlx serve --continuous-batching (OpenBLAS preloaded)
# then one table (summarize.py): aggregate output tok/s, TTFT p50/p99, per-request decode tok/s,
# RSS after each config, and per server its ready time, idle/final RSS and VmHWM; then each corral
# worker's own peak RSS and MLX peak (the harness's VmHWM is the supervisor's).
#
# Usage: scripts/bench_batching.sh [CORRAL_BIN_DIR [PEERS_DIR [MODELS]]]
#   CORRAL_BIN_DIR  holds corral and corral-worker (default: target/release of this checkout)
#   PEERS_DIR       the work directory of shared/peers/setup.sh (default /tmp/corral-peers),
#                   made with `PEERS_DIR=... WITH_VLLM_MLX=1 bash ../shared/peers/setup.sh`
#   MODELS          space-separated, each served from PEERS_DIR/models/NAME-llama-f32
#                   (default "tiny small")
# Knobs (environment):
#   SERVERS   which servers, in order (default "corral corral-seq1 mlx_lm vllm-mlx")
#   CONFIGS   load configs for every model, overriding the defaults below; "CxM" = C concurrent
#             closed-loop clients x M streaming requests each (~100 prompt tokens, 32 out)
#   REPEAT    run each config N times; the table then shows medians (default 1; N times as long)
#   DEADLINE  seconds per config, TIMEOUT seconds per request (default 300, 150: a request queued
#             behind 15 others at max_sequences = 1 must not time out)
#   PORT      first port; the servers use PORT..PORT+3 (default 18090)
# Default configs: tiny 1x8,2x8,4x8,8x4,16x4 (a few minutes for the four servers); small (and any
# other model) 1x4,2x4,4x4,8x2,16x2, half the requests, to keep its pass of the four servers
# under about 20 minutes on 2 cores: on a busy machine mlx_lm.server took ~7 s for one small
# request alone and ~2.7 s a request at 8 concurrent, and corral-seq1 runs the 86 requests of a
# pass (warm-ups included) one after another. Each config also sends 2 warm-up requests.
#
# Every run writes a fresh directory PEERS_DIR/runs/<date>-<pid>: results/*.jsonl, logs/ (one
# server log per label), the corral config, models dirs and state dirs, and vllm-mlx's HOME (its
# prefix cache is saved on exit and reloaded on start, so every run starts it empty). Every server
# runs in its own process group and is stopped by bench.py when its pass ends, also on Ctrl-C or
# SIGTERM to this script. The machine is noisy: compare ratios within one run, never absolute
# figures across runs.
set -euo pipefail
set -m # bench.py runs as a background job, so it gets the SIGINT we forward (see on_signal)

root=$(cd "$(dirname "$0")/.." && pwd)
bin_dir=$(cd "${1:-$root/target/release}" && pwd)
peers=$(cd "${2:-/tmp/corral-peers}" && pwd)
models=${3:-tiny small}
servers=${SERVERS:-corral corral-seq1 mlx_lm vllm-mlx}
repeat=${REPEAT:-1}
deadline=${DEADLINE:-300}
timeout=${TIMEOUT:-150}
port0=${PORT:-18090}
openblas=/usr/lib/$(uname -m)-linux-gnu/openblas-pthread/libopenblas.so.0

die() {
  echo "bench_batching: $*" >&2
  exit 1
}
for server in $servers; do
  case $server in
  corral | corral-seq1)
    [[ -x $bin_dir/corral && -x $bin_dir/corral-worker ]] ||
      die "no corral and corral-worker in $bin_dir (cargo xtask cargo build --release)"
    ;;
  mlx_lm) [[ -x $peers/venv/bin/python ]] || die "no $peers/venv: run shared/peers/setup.sh" ;;
  vllm-mlx)
    [[ -x $peers/venv-vllm-mlx/bin/vllm-mlx ]] ||
      die "no vllm-mlx in $peers: run WITH_VLLM_MLX=1 shared/peers/setup.sh"
    ;;
  *) die "unknown server '$server' (corral, corral-seq1, mlx_lm, vllm-mlx)" ;;
  esac
done
for m in $models; do
  [[ -f $peers/models/$m-llama-f32/model.safetensors ]] ||
    die "no model $peers/models/$m-llama-f32: run shared/peers/setup.sh"
done
[[ -e $openblas ]] || die "no OpenBLAS at $openblas (apt-get install libopenblas0-pthread)"
for f in bench.py load.py summarize.py; do
  [[ -f $peers/$f ]] || die "no $peers/$f: run shared/peers/setup.sh"
done

run=$peers/runs/$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$peers/runs"
mkdir "$run"
# bench.py and summarize.py keep results/ and logs/ beside themselves: copies make them the run's.
cp "$peers"/bench.py "$peers"/load.py "$peers"/summarize.py "$run"/
printf '[batching]\nmax_sequences = 1\n' >"$run/corral-seq1.toml"
echo "bench_batching: results in $run" >&2

# corral reads CORRAL_* variables (config file, models, state dir...): none may leak in.
while read -r name; do unset "$name"; done < <(compgen -e | grep '^CORRAL_' || true)

bench_pid=""
watcher_pid=""
on_signal() {
  if [[ -n $watcher_pid ]]; then kill "$watcher_pid" 2>/dev/null || true; fi
  if [[ -n $bench_pid ]]; then
    kill -INT "$bench_pid" 2>/dev/null || true # bench.py's finally stops its server's group
    wait "$bench_pid" 2>/dev/null || true
  fi
  echo "bench_batching: interrupted; partial results in $run" >&2
  exit 130
}
trap on_signal INT TERM

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The harness's VmHWM is the supervisor's; a corral worker's own peak resident set comes from
# `/admin/workers` (the worker's getrusage), polled while its pass runs: the last answer wins.
watch_worker_peak() {
  local label=$1 port=$2 answer
  while sleep 1; do
    if answer=$(curl -sf "http://127.0.0.1:$port/admin/workers" 2>/dev/null); then
      printf '%s\n' "$answer" >"$run/workers-$label.json"
    fi
  done
}
worker_peaks() {
  python3 - "$run" <<'PY'
import glob, json, os, sys
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "workers-*.json"))):
    label = os.path.basename(path)[len("workers-"):-len(".json")]
    for worker in json.load(open(path)).get("data", []):
        stats = worker.get("stats") or {}
        if stats.get("resident_bytes"):
            rows.append(f"| {label} | {stats['resident_bytes'] / 2**20:.0f} | {stats.get('mlx_peak_bytes', 0) / 2**20:.0f} |")
if rows:
    print("| corral worker | peak RSS MB | MLX peak MB |")
    print("|---|---|---|")
    print("\n".join(rows))
PY
}

failed=()
files=()
# bench LABEL PORT [bench.py options] -- SERVER COMMAND...
bench() {
  local label=$1 port=$2 rc=0 start=$SECONDS
  shift 2
  if port_busy "$port"; then
    echo "bench_batching: port $port is already in use; skipping $label" >&2
    failed+=("$label (port $port busy)")
    return
  fi
  # bench.py with SIGINT raising KeyboardInterrupt even where this script started with SIGINT
  # ignored (a background job of a non-interactive shell): its finally then stops the server.
  python3 -c 'import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except KeyboardInterrupt:
    sys.exit(130)' "$run/bench.py" \
    --label "$label" --port "$port" --configs "$configs" --repeat "$repeat" \
    --deadline "$deadline" --timeout "$timeout" "$@" &
  bench_pid=$!
  wait "$bench_pid" || rc=$?
  bench_pid=""
  echo "bench_batching: $label took $((SECONDS - start)) s" >&2
  files+=("$run/results/$label.jsonl")
  if ((rc != 0)); then failed+=("$label (bench.py exit $rc; see $run/logs/$label.log)"); fi
}

for m in $models; do
  model_dir=$peers/models/$m-llama-f32
  case $m in
  tiny) configs=${CONFIGS:-1x8,2x8,4x8,8x4,16x4} ;;
  *) configs=${CONFIGS:-1x4,2x4,4x4,8x2,16x2} ;;
  esac
  # corral serves a models directory; the link's name is the model id.
  mkdir "$run/models-$m"
  ln -s "$model_dir" "$run/models-$m/$m"
  port=$port0
  for server in $servers; do
    label=$m-$server
    case $server in
    corral | corral-seq1)
      config=()
      if [[ $server == corral-seq1 ]]; then config=(--config "$run/corral-seq1.toml"); fi
      watch_worker_peak "$label" "$port" &
      watcher_pid=$!
      bench "$label" "$port" --model "$m" --health /health -- \
        "$bin_dir/corral" serve "${config[@]}" --host 127.0.0.1 --port "$port" \
        --models-dir "$run/models-$m" --state-dir "$run/state-$label" --pin "$m"
      kill "$watcher_pid" 2>/dev/null || true
      wait "$watcher_pid" 2>/dev/null || true
      watcher_pid=""
      ;;
    mlx_lm)
      bench "$label" "$port" --env "LD_PRELOAD=$openblas" \
        --env "HF_HUB_CACHE=$peers/hf-cache" --env HF_HUB_OFFLINE=1 -- \
        "$peers/venv/bin/python" -m mlx_lm server --model "$model_dir" \
        --host 127.0.0.1 --port "$port"
      ;;
    vllm-mlx)
      mkdir "$run/home-$label"
      bench "$label" "$port" --model "$m" --env "LD_PRELOAD=$openblas" \
        --env "HF_HUB_CACHE=$peers/hf-cache" --env HF_HUB_OFFLINE=1 \
        --env "HOME=$run/home-$label" -- \
        "$peers/venv-vllm-mlx/bin/vllm-mlx" serve "$model_dir" --served-model-name "$m" \
        --host 127.0.0.1 --port "$port" --continuous-batching
      ;;
    esac
    port=$((port + 1))
  done
done
trap - INT TERM

existing=()
for f in "${files[@]}"; do if [[ -s $f ]]; then existing+=("$f"); fi; done
median=()
of=""
if ((repeat > 1)); then
  median=(--median)
  of="; medians of $repeat"
fi
echo
echo "## corral batching vs peers: models $models; configs CxM (C clients x M streaming" \
  "requests, ~100 prompt tokens, 32 out, temperature 0)$of"
echo
if ((${#existing[@]})); then python3 "$run/summarize.py" "${median[@]}" "${existing[@]}"; fi
echo
worker_peaks
echo
echo "results: $run"
if ((${#failed[@]})); then
  printf 'failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
