#!/usr/bin/env bash
# Regenerates tests/data/reference_logits.json with mlx-lm,
# tests/data/vision (vision.py: Qwen3.5's vision-language checkpoints as transformers writes
# them, with its preprocessing and logits for chats with images; vision_mlx.py: their mlx-vlm
# layouts with mlx-vlm's),
# tests/data/toolchain (toolchain.py: each architecture as transformers, mlx_lm.convert and
# llama.cpp's converter and quantizer write it, with each one's logits),
# tests/data/mtp (mtp.py: some of those with their multi-token-prediction layers, with
# transformers' MTP drafts, and llama.cpp's conversions of those it keeps them in),
# tests/data/quant_modes (quant_modes.py: some of their Hugging Face layouts as mlx_lm.convert
# quantizes them in each mode and recipe, with mlx-lm's logits),
# tests/data/gguf_forms (gguf_forms.py: split, fused and MXFP4 GGUFs by llama.cpp's tools),
# tests/data/smollm2_reference.json with transformers and llama.cpp,
# tests/data/smollm2_requantized.json (llama.cpp's greedy answers on SmolLM2 as Q4_K_M, Q5_K_M and
# Q6_K, files `cargo xtask setup` makes beside the Q4_1 one), tests/data/gguf_pre_tokenizers.json
# (llama.cpp's token ids under each GGUF pre-tokenizer), tests/data/gguf_blocks.gguf (every
# GGUF block type with gguf-py's dequantization of it), and the embedding references
# (embeddings.sh) with sentence-transformers and transformers (run through `cargo xtask reference`,
# which passes the MLX version, the SmolLM2 GGUF and the all-MiniLM-L6-v2 directory). Needs Python 3
# with pip, network access to PyPI, and cmake and a C++ compiler to build llama-cpp-python; the Rust
# tests themselves need no Python.
set -euo pipefail
# shellcheck source=scripts/reference/pinned_venv.sh
source "$(dirname "$0")/pinned_venv.sh"

mlx_version=$1
gguf=$2
minilm=$3
mlx_lm_version=0.32.2
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$root/build/reference
venv=$work/venv
mkdir -p "$work"

extra=""
[[ $(uname) == Linux ]] && extra="[cpu]"
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c "import mlx_lm" 2>/dev/null; then
  python3 -m venv "$venv"
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

# The layouts the real tools make (toolchain.py): transformers writes the Hugging Face folder,
# mlx_lm.convert the mlx-community ones. A venv of its own, rebuilt whenever the pins change;
# PyPI's torch wheel brings CUDA libraries (several GB) that the CPU run never loads.
toolchain_venv=$work/hf-venv
toolchain_pins="torch==2.15.0 transformers==5.23.0 tokenizers==0.23.3 safetensors==0.8.0 sentencepiece==0.2.3"
toolchain_pins+=" pillow==12.0.0"
toolchain_pins+=" mlx${extra:-}==$mlx_version mlx-lm==$mlx_lm_version numpy==2.4.6"
pinned_venv "$toolchain_venv" "$toolchain_pins"
# transformers 5.23 imports Pixtral's processor (Mistral 3's, vision.py) only beside torchvision,
# though vision.py runs its PIL backend: the newest torchvision PyPI has, without its pin on torch.
"$toolchain_venv/bin/pip" install --quiet --no-deps torchvision==0.29.2
# llama.cpp's logits on the GGUF layouts (toolchain_gguf.py): llama-cpp-python 0.3.36's own
# package runs from the sdist on the shared libraries `cargo xtask setup` built from it, so
# this venv holds only the package's dependencies; its converter runs in hf-venv.
llama_cpp_venv=$work/llama-cpp-venv
llama_cpp_pins="numpy==2.4.6 diskcache==5.6.3 typing-extensions==4.16.0 jinja2==3.1.6"
pinned_venv "$llama_cpp_venv" "$llama_cpp_pins"
# The images the vision tests send, made by Pillow.
"$toolchain_venv/bin/python" "$root/scripts/reference/vision_images.py" "$root/tests/data/vision/images"
# Qwen3.5's, Gemma 3's, Gemma 4's and Mistral 3's vision-language checkpoints with transformers' preprocessing, positions, tower
# outputs and logits for chats with those images (vision.py).
"$toolchain_venv/bin/python" "$root/scripts/reference/vision.py" "$root/scripts/reference/vision.json" \
  "$root/tests/data/vision/images" "$root/tests/data/vision"
# Their mlx-vlm layouts (vision_mlx.py), in a venv of its own: mlx-vlm 0.7.10 needs MLX 0.32.4,
# newer than the one corral links. Rebuilt whenever the pins change.
vlm_venv=$work/vlm-venv
vlm_pins="mlx-vlm==0.7.10 mlx${extra:-}==0.32.4 transformers==5.23.0 tokenizers==0.23.3"
vlm_pins+=" safetensors==0.8.0 numpy==2.4.6 pillow==12.0.0"
pinned_venv "$vlm_venv" "$vlm_pins"
"$vlm_venv/bin/python" "$root/scripts/reference/vision_mlx.py" "$root/scripts/reference/vision.json" \
  "$root/tests/data/vision/images" "$root/tests/data/vision"
# Their GGUF layout with the tower in a projector file (vision_gguf.py), by llama.cpp's converter,
# and llama.cpp's own answer through its multimodal library (llama_cpp_mtmd.py).
"$toolchain_venv/bin/python" "$root/scripts/reference/vision_gguf.py" "$root/scripts/reference/vision.json" \
  "$root/tests/data/vision/images" "$root/tests/data/vision" "$llama_cpp_venv/bin/python"
echo "wrote $root/tests/data/vision"
"$toolchain_venv/bin/python" "$root/scripts/reference/toolchain.py" \
  "$root/scripts/reference/toolchain.json" "$root/tests/data/toolchain" \
  "$llama_cpp_venv/bin/python"
echo "wrote $root/tests/data/toolchain"
# Those checkpoints with the release's multi-token-prediction layers, with transformers' MTP.
"$toolchain_venv/bin/python" "$root/scripts/reference/mtp.py" \
  "$root/scripts/reference/toolchain.json" "$root/tests/data/mtp"
echo "wrote $root/tests/data/mtp"
# Some of those Hugging Face layouts as mlx_lm.convert quantizes them in each mode and recipe.
"$toolchain_venv/bin/python" "$root/scripts/reference/quant_modes.py" \
  "$root/tests/data/toolchain" "$root/tests/data/quant_modes"
echo "wrote $root/tests/data/quant_modes"
# The GGUFs in parts, with fused projections, with MXFP4 experts, by llama.cpp's own tools.
"$toolchain_venv/bin/python" "$root/scripts/reference/gguf_forms.py" \
  "$root/tests/data/toolchain" "$root/tests/data/gguf_forms" "$llama_cpp_venv/bin/python"
echo "wrote $root/tests/data/gguf_forms"
# Each served type's config.json as its transformers class writes it with every default, and
# with only the keys every decoder needs (config_defaults.py): the types are the worker's list.
mapfile -t served < <(sed -n '/^pub const SUPPORTED/,/^];/s/^ *"\([a-z0-9_]*\)",$/\1/p' \
  "$root/worker/src/model/supported.rs")
"$toolchain_venv/bin/python" "$root/scripts/reference/config_defaults.py" \
  "$root/tests/data/config_defaults.json" "${served[@]}"
echo "wrote $root/tests/data/config_defaults.json"

# A venv of its own: these pins do not mix with mlx-lm's. Rebuilt whenever the pins change.
smollm2_venv=$work/smollm2-venv
smollm2_pins="transformers==4.57.6 tokenizers==0.22.2 gguf==0.19.0 llama-cpp-python==0.3.36"
smollm2_pins+=" jinja2==3.1.6 numpy==2.4.6"
# pip compiles llama.cpp here (minutes): for the CPU only, without the multimodal library, and
# not from its cache, which would ignore CMAKE_ARGS.
CMAKE_ARGS="-DGGML_METAL=OFF -DLLAVA_BUILD=OFF" pinned_venv "$smollm2_venv" "$smollm2_pins" --no-cache-dir

"$smollm2_venv/bin/python" "$root/scripts/reference/smollm2_reference.py" \
  "$gguf" "$root/tests/data/smollm2_reference.json"
echo "wrote $root/tests/data/smollm2_reference.json"

# Same venv: llama.cpp's greedy answers on the K-quant files `cargo xtask setup` quantizes from
# $gguf with llama.cpp's own quantizer, beside it.
requantized=()
for recipe in Q4_K_M Q5_K_M Q6_K; do
  requantized+=("$(dirname "$gguf")/SmolLM2-135M-Instruct.$recipe.gguf")
done
"$smollm2_venv/bin/python" "$root/scripts/reference/smollm2_requantized.py" \
  "$root/tests/data/smollm2_reference.json" "$root/tests/data/smollm2_requantized.json" \
  "${requantized[@]}"
echo "wrote $root/tests/data/smollm2_requantized.json"

# Same venv: llama.cpp's ids under each pre-tokenizer corral serves.
"$smollm2_venv/bin/python" "$root/scripts/reference/gguf_pre_tokenizers.py" \
  "$root/tests/data/gguf_pre_tokenizers.json" \
  "$root/build/llama-quantize/llama_cpp_python-0.3.36/vendor/llama.cpp/src/llama-vocab.cpp"
echo "wrote $root/tests/data/gguf_pre_tokenizers.json"

# Same venv: it pins gguf-py, whose dequantization is llama.cpp's reference.
"$smollm2_venv/bin/python" "$root/scripts/reference/gguf_blocks.py" \
  "$root/tests/data/gguf_blocks.gguf"
echo "wrote $root/tests/data/gguf_blocks.gguf"

bash "$root/scripts/reference/embeddings.sh" "$minilm"
