#!/usr/bin/env bash
# Regenerates tests/data/reference_logits.json with mlx-lm (run through `cargo xtask reference`).
# Needs Python 3 with pip and network access to PyPI; the Rust tests themselves need no Python.
set -euo pipefail

mlx_version=$1
mlx_lm_version=0.32.2
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$root/build/reference
venv=$work/venv
mkdir -p "$work"

if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c "import mlx_lm" 2>/dev/null; then
  python3 -m venv "$venv"
  extra=""
  [[ $(uname) == Linux ]] && extra="[cpu]"
  "$venv/bin/pip" install --quiet "mlx${extra}==$mlx_version" "mlx-lm==$mlx_lm_version"
fi

models=()
while read -r name args; do
  [[ -z $name || $name == \#* ]] && continue
  rm -rf "$work/$name"
  # shellcheck disable=SC2086
  cargo run --quiet --package corral -- fixture $args --out "$work/$name"
  models+=("$name=$work/$name")
done <"$root/scripts/reference/fixtures.txt"

"$venv/bin/python" "$root/scripts/reference/reference_logits.py" \
  "$root/tests/data/reference_logits.json" "${models[@]}"
echo "wrote $root/tests/data/reference_logits.json"
