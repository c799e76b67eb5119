"""The other forms GGUF files take, made by llama.cpp's own tools from the toolchain fixtures.

Usage: gguf_forms.py TOOLCHAIN_DIR OUT_DIR LLAMA_CPP_PYTHON

From TOOLCHAIN_DIR/<arch>/hf (toolchain.py), with the converter and quantizer of
toolchain_gguf.py, OUT_DIR gets:

- split/: qwen3_moe's F32 GGUF in parts, as `convert_hf_to_gguf.py --split-max-tensors N` writes
  it (`model-0000K-of-0000M.gguf`); the same tensors as TOOLCHAIN_DIR/qwen3_moe/gguf-f32.
- fused/: the projections the converter fuses on request (`--fuse-qkv`: `attn_qkv`, its bias
  too; `--fuse-gate-up-exps`: `ffn_gate_up_exps`, which the pinned gguf-py names only for some
  architectures, Qwen3.5-MoE among them, not Qwen3-MoE), through a `llama-quantize` type
  (`<arch>-<type>-fused.gguf`), beside TOOLCHAIN_DIR/<arch>/gguf-f32 (the same converter
  unfused) through the same type (`<arch>-<type>.gguf`): qwen3_moe's q, k, v in Q4_1,
  qwen3_5_moe's in Q8_0 with its experts' gate and up, gpt-oss's with their biases beside MXFP4
  experts.
- mxfp4/: gpt-oss's experts as ggml's MXFP4 blocks (`llama-quantize MXFP4_MOE` of
  TOOLCHAIN_DIR/gpt_oss/gguf-f32, the type the releases ship their experts in) with llama.cpp's
  logits (reference.safetensors, as toolchain_gguf.py makes them) and a quantization bound of
  twice what the type moves llama.cpp's own prompt logits from the F32 file's.

OUT_DIR/index.json: what made each file, its tensor types, and mxfp4's bound.
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path

from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).parent))
from toolchain_gguf import (  # noqa: E402
    LLAMA_CPP_VERSION,
    convert,
    llama_cpp_reference,
    max_prompt_diff,
    quantize,
    tensor_types,
)

# Three parts of qwen3_moe's 27 tensors.
SPLIT_MAX_TENSORS = 10

# arch: (the converter's fusing options, llama-quantize type, file suffix).
FUSED = {
    "qwen3_moe": (("--fuse-qkv",), "Q4_1", "q4_1"),
    "qwen3_5_moe": (("--fuse-qkv", "--fuse-gate-up-exps"), "Q8_0", "q8_0"),
    "gpt_oss": (("--fuse-qkv",), "MXFP4_MOE", "mxfp4"),
}


def make_split(toolchain, out, index):
    directory = out / "split"
    directory.mkdir()
    convert(toolchain / "qwen3_moe/hf", directory / "model.gguf", "f32",
            ("--split-max-tensors", str(SPLIT_MAX_TENSORS)))
    parts = sorted(path.name for path in directory.iterdir())
    index["split"] = {
        "from": "qwen3_moe/hf",
        "made_by": f"convert_hf_to_gguf.py --outtype f32 --split-max-tensors {SPLIT_MAX_TENSORS} "
                   f"({LLAMA_CPP_VERSION})",
        "parts": parts,
    }


def make_fused(toolchain, out, index):
    directory = out / "fused"
    directory.mkdir()
    index["fused"] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for arch, (fuse, kind, suffix) in FUSED.items():
            fused_f32 = Path(scratch) / f"{arch}-f32-fused.gguf"
            convert(toolchain / arch / "hf", fused_f32, "f32", fuse)
            converted = " ".join(["convert_hf_to_gguf.py --outtype f32", *fuse])
            for source, fused, made_from in (
                (toolchain / arch / "gguf-f32/model.gguf", "", f"{arch}/gguf-f32"),
                (fused_f32, "-fused", f"{converted} of {arch}/hf"),
            ):
                quantized = directory / f"{arch}-{suffix}{fused}.gguf"
                quantize(source, quantized, kind)
                index["fused"][quantized.name] = {
                    "made_by": f"llama-quantize {kind} of {made_from} ({LLAMA_CPP_VERSION})",
                    "tensor_types": tensor_types(quantized),
                }


def make_mxfp4(toolchain, out, llama_python, index):
    directory = out / "mxfp4"
    directory.mkdir()
    f32 = toolchain / "gpt_oss/gguf-f32"
    model_file = directory / "model.gguf"
    quantize(f32 / "model.gguf", model_file, "MXFP4_MOE")
    from safetensors.torch import load_file

    f32_ref = load_file(str(f32 / "reference.safetensors"))
    ref = llama_cpp_reference(llama_python, model_file, f32_ref["prompt"], len(f32_ref["decoded"]))
    save_file(ref, str(directory / "reference.safetensors"),
              metadata={"llama_cpp_python": "0.3.36", "kv_cache": "f32"})
    bound = 2 * max_prompt_diff(ref["logits"], f32_ref["logits"], len(f32_ref["prompt"]))
    index["mxfp4"] = {
        "from": "gpt_oss/gguf-f32",
        "made_by": f"llama-quantize MXFP4_MOE of gpt_oss/gguf-f32 ({LLAMA_CPP_VERSION})",
        "reference": "llama.cpp",
        "decoded": ref["decoded"].tolist(),
        "quantization_bound": round(bound, 4),
        "tensor_types": tensor_types(model_file),
    }


def main():
    toolchain, out, llama_python = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    index = {}
    make_split(toolchain, out, index)
    make_fused(toolchain, out, index)
    make_mxfp4(toolchain, out, llama_python, index)
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
