#!/bin/sh
# Runs the official OpenAI SDKs (Python `openai` from PyPI, Node `openai` from npm) and the
# Anthropic Node SDK (`@anthropic-ai/sdk`, on the Messages API) against a corral that is already
# serving, e.g. `cargo xtask serve`. Installs them under build/.
# Usage: scripts/openai_clients/run.sh [BASE_URL] [MODEL]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
base=${1:-http://127.0.0.1:8080/v1}
model=${2:-corral-small}
venv="$root/build/openai-clients/venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade openai
"$venv/bin/python" "$here/check.py" "$base" "$model"
if command -v npm >/dev/null; then
  node_dir="$root/build/openai-clients/node"
  mkdir -p "$node_dir"
  cp "$here/check.mjs" "$here/anthropic.mjs" "$node_dir/"
  (cd "$node_dir" && npm install --silent --no-save openai @anthropic-ai/sdk >/dev/null)
  node "$node_dir/check.mjs" "$base" "$model"
  # The Anthropic SDK takes the server's root and adds /v1 itself.
  node "$node_dir/anthropic.mjs" "${base%/v1}" "$model"
else
  echo "npm not found: skipped the Node SDK"
fi
