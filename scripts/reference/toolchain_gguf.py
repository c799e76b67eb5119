"""The GGUF layouts of toolchain.py: llama.cpp's own converter and quantizer on the `hf`
folder, with llama.cpp's own logits. llama.cpp is llama-cpp-python 0.3.36's sdist, which
`cargo xtask setup` unpacks and builds (llama-quantize and the shared libraries) under
build/llama-quantize/.

- gguf-f32: `convert_hf_to_gguf.py --outtype f32` (the exact weights; see why below).
- gguf-f16: `convert_hf_to_gguf.py --outtype f16`.
- gguf-q8_0, gguf-q4_k_m: `llama-quantize` of gguf-f32 to Q8_0 and Q4_K_M (it picks each
  tensor's type; index.json records what it chose).

Reference: llama.cpp's logits on that file (llama_cpp_logits.py, in its own venv), with an
f32 KV cache. The float comparison is made on gguf-f32: ggml multiplies F16 weights by
activations rounded to f16, and its default KV cache is f16, so on gguf-f16 llama.cpp and
transformers part by ~1e-2 from rounding alone, which would hide a real difference of that
size; on gguf-f32 with an f32 cache they agree to ~1e-5, so any departure is llama.cpp's.
"""

import os
import json
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
LLAMA_CPP = ROOT / "build/llama-quantize"
SDIST = LLAMA_CPP / "llama_cpp_python-0.3.36"
CONVERTER = SDIST / "vendor/llama.cpp/convert_hf_to_gguf.py"
QUANTIZE = LLAMA_CPP / "build/bin/llama-quantize"
LLAMA_CPP_VERSION = "llama.cpp of llama-cpp-python 0.3.36"

# llama.cpp's name for the toolchain tokenizer's pre-tokenizer: GPT-2's byte-level regex.
PRE_TOKENIZER = "gpt-2"

# (layout, converter outtype or None, llama-quantize type or None)
LAYOUTS = (
    ("gguf-f32", "f32", None),
    ("gguf-f16", "f16", None),
    ("gguf-q8_0", None, "Q8_0"),
    ("gguf-q4_k_m", None, "Q4_K_M"),
)


def last_lines(text, count=3):
    return " | ".join(line.strip() for line in text.strip().splitlines()[-count:])


def run(command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(command[1 if command[0] == sys.executable else 0]).name} "
                           f"exited {done.returncode}: {last_lines(done.stderr or done.stdout)}")


WITHOUT_MTP_LAYERS = {"qwen3_next", "qwen3_5", "qwen3_5_moe"}


def convert(hf_dir, out_file, outtype, options=(), has_mtp=False):
    wrapper = Path(__file__).parent / "convert_hf_to_gguf.py"
    # The converter counts Qwen3-Next's and Qwen3.5's multi-token-prediction layers from the
    # checkpoint and stops when it finds none; transformers writes none, so it is told so with
    # `--no-mtp`, as for any checkpoint without them (other architectures refuse the flag).
    # mtp.py's checkpoints have them, as releases do.
    config = json.loads((hf_dir / "config.json").read_text())
    without = config["model_type"] in WITHOUT_MTP_LAYERS and not has_mtp
    no_mtp = ["--no-mtp"] if without else []
    run([sys.executable, str(wrapper), str(CONVERTER), PRE_TOKENIZER, str(hf_dir),
         "--outtype", outtype, "--outfile", str(out_file), *no_mtp, *options])


def quantize(source, out_file, kind):
    # One thread: the quantized blocks are the same for any count, and it is the same command
    # on every machine.
    run([str(QUANTIZE), str(source), str(out_file), kind, "1"])


def tensor_types(path):
    sys.path.insert(0, str(CONVERTER.parent / "gguf-py"))
    from gguf import GGUFReader

    counts = {}
    for tensor in GGUFReader(path).tensors:
        name = tensor.tensor_type.name
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def llama_cpp_reference(llama_python, model_file, prompt, steps):
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=str(QUANTIZE.parent), PYTHONPATH=str(SDIST))
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "logits.npz"
        run([llama_python, str(Path(__file__).parent / "llama_cpp_logits.py"), str(model_file),
             ",".join(str(int(t)) for t in prompt), str(steps), str(out)], env=env)
        with np.load(out) as arrays:
            return {name: torch.from_numpy(arrays[name].copy()) for name in arrays.files}



def uses_gelu(hf_dir):
    config = json.loads((hf_dir / "config.json").read_text())
    text = config.get("text_config") or config
    activation = text.get("hidden_activation") or text.get("hidden_act") or ""
    return "gelu" in activation


def max_prompt_diff(a, b, prompt_length):
    return float((a[:prompt_length] - b[:prompt_length]).abs().max())


def make_gguf(entry, hf_dir, arch_dir, hf_ref, llama_python, decode_steps, top_two_gap, tolerance):
    """Adds the GGUF layouts to `entry`; a tool that fails is recorded with its error."""
    prompt = hf_ref["prompt"]
    prompt_length = len(prompt)
    made = {}
    for layout, outtype, kind in LAYOUTS:
        directory = arch_dir / layout
        directory.mkdir()
        model_file = directory / "model.gguf"
        try:
            if outtype:
                convert(hf_dir, model_file, outtype)
                made_by = f"convert_hf_to_gguf.py --outtype {outtype} ({LLAMA_CPP_VERSION})"
            elif "gguf-f32" not in made:
                raise RuntimeError("no gguf-f32 to quantize")
            else:
                quantize(arch_dir / "gguf-f32/model.gguf", model_file, kind)
                made_by = f"llama-quantize {kind} of gguf-f32 ({LLAMA_CPP_VERSION})"
            ref = llama_cpp_reference(llama_python, model_file, prompt, decode_steps)
        except Exception as error:  # a tool's failure is recorded, never papered over
            for path in directory.iterdir():
                path.unlink()
            directory.rmdir()
            last = traceback.format_exception_only(error)[-1].strip()
            entry["layouts"][layout] = {"not_made": f"{LLAMA_CPP_VERSION}: {last}"}
            continue
        save_file(ref, str(directory / "reference.safetensors"),
                  metadata={"llama_cpp_python": "0.3.36", "kv_cache": "f32"})
        made[layout] = ref["logits"]
        entry["layouts"][layout] = {
            "made_by": made_by,
            "reference": "llama.cpp",
            "decoded": ref["decoded"].tolist(),
            "min_top_two_gap": round(top_two_gap(ref["logits"], decode_steps), 6),
            "tensor_types": tensor_types(model_file),
        }
    if "gguf-f32" not in made:
        return
    f32 = entry["layouts"]["gguf-f32"]
    f32["max_abs_diff_to_transformers"] = float((made["gguf-f32"] - hf_ref["logits"]).abs().max())
    if f32["max_abs_diff_to_transformers"] > tolerance:
        # Unlike mlx-lm's, this departure can be the file's: the converter may write the
        # architecture's values as llama.cpp reads them, not as transformers 5's config means
        # them. corral reads the file, so llama.cpp, which reads the same file, stays its
        # reference; the number is kept for the report.
        f32["departs_from_transformers"] = "llama.cpp's logits on this file depart from transformers'"
    if uses_gelu(hf_dir) and "departs_from_transformers" in f32:
        # llama.cpp's CPU GELU rounds each input to f16 (steps of 2^-11 relative) and reads a
        # table (GGML_GELU_FP16), so its F32 logits carry that rounding while the file holds
        # transformers' weights exactly: numbers, not a reading of the file, part the two, and
        # transformers decides.
        f32["reference_layout"] = "hf"
        f32["reference_why"] = "llama.cpp's CPU GELU reads an f16 table (GGML_GELU_FP16)"
        del f32["departs_from_transformers"]
    for layout, logits in made.items():
        if layout == "gguf-f32":
            continue
        # f16 weights and llama.cpp's f16 or 8-bit activations never give corral's logits
        # exactly: the bound is twice what the type moves llama.cpp's own prompt logits.
        entry["layouts"][layout]["quantization_bound"] = round(
            2 * max_prompt_diff(logits, made["gguf-f32"], prompt_length), 4)
