#!/usr/bin/env bash
# Regenerates tests/data/minilm_reference.json (sentence-transformers on all-MiniLM-L6-v2) and
# tests/data/encoder_reference.json (transformers on the encoder and decoder-embedding fixtures
# listed in encoder_fixtures.txt). Run by regenerate.sh, or alone:
#   scripts/reference/embeddings.sh build/models/all-MiniLM-L6-v2
# Needs Python 3 with pip and network access to PyPI (torch's CPU build from PyPI).
set -euo pipefail
# shellcheck source=scripts/reference/pinned_venv.sh
source "$(dirname "$0")/pinned_venv.sh"

minilm=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$root/build/reference
mkdir -p "$work"

# A venv of its own: torch and sentence-transformers do not mix with mlx-lm's or llama.cpp's
# pins. Rebuilt whenever the pins change.
venv=$work/embedding-venv
pins="torch==2.9.1 sentence-transformers==5.1.2 transformers==4.57.6 tokenizers==0.22.2"
pins+=" numpy==2.4.6"
pinned_venv "$venv" "$pins"

"$venv/bin/python" "$root/scripts/reference/minilm_reference.py" \
  "$minilm" "$root/tests/data/minilm_reference.json"
echo "wrote $root/tests/data/minilm_reference.json"

fixtures=()
while read -r name args; do
  [[ -z $name || $name == \#* ]] && continue
  rm -rf "${work:?}/$name"
  # shellcheck disable=SC2086
  cargo run --quiet --package corral -- fixture $args --out "$work/$name"
  fixtures+=("$name=$work/$name:$args")
done <"$root/scripts/reference/encoder_fixtures.txt"

"$venv/bin/python" "$root/scripts/reference/encoder_reference.py" \
  "$root/tests/data/encoder_reference.json" "${fixtures[@]}"
echo "wrote $root/tests/data/encoder_reference.json"
