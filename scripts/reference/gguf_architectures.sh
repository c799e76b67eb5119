#!/usr/bin/env bash
# Writes tests/data/gguf_architectures from tests/data/architectures (gguf_architectures.py: each
# tiny architecture as llama.cpp's converter would write it, with gguf-py). Run by
# regenerate.sh after architectures.py; alone: bash scripts/reference/gguf_architectures.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
venv=$root/build/reference/gguf-arch-venv
pins="gguf==0.19.0 numpy==2.4.6"
if [[ $(cat "$venv/corral-pins" 2>/dev/null) != "$pins" ]]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet $pins
  echo "$pins" >"$venv/corral-pins"
fi
"$venv/bin/python" "$root/scripts/reference/gguf_architectures.py" \
  "$root/tests/data/architectures" "$root/tests/data/gguf_architectures"
echo "wrote $root/tests/data/gguf_architectures"
