"""Checkpoints quantized by mlx-lm in each of its modes and recipes, with mlx-lm's logits.

Usage: quant_modes.py TOOLCHAIN_DIR OUT_DIR [NAME ...]

Each fixture starts from an architecture's Hugging Face layout in TOOLCHAIN_DIR (`<arch>/hf`, as
transformers wrote it, with its tokenizer; toolchain.py) and is made by `mlx_lm.convert` itself
(its `convert()`, called with the arguments its command line passes), into OUT_DIR/<name>/ as
convert writes it (config.json, model.safetensors and its index, the tokenizer it copies; the
model card is dropped). Only architectures whose float `mlx` layout mlx-lm holds to
transformers' logits are used (toolchain's index.json), so corral, which reads the config as
transformers does, is held to mlx-lm's own logits.

Each fixture that mlx-lm can run gets reference.safetensors (mlx_reference.py) from the model as
`mlx_lm.load` reads it back. One that mlx-lm cannot run on this MLX (nvfp4 experts with a
per-expert global scale: mlx-lm's `quantize_model(global_scale=True)`, which convert does not
offer) gets no reference; index.json records mlx-lm's own failure for it.

OUT_DIR/index.json: per fixture, the checkpoint it came from, the command line that made it,
config.json's `quantization`, which weights are quantized in which mode, the decoded tokens and
smallest top-two gap, or `mlx_lm_fails` with mlx-lm's error.
"""

import json
import shutil
import sys
import tempfile
import traceback
from importlib.metadata import version
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.switch_layers import QuantizedSwitchLinear

sys.path.insert(0, str(Path(__file__).parent))
from mlx_reference import (  # noqa: E402
    MLX_LM_SWITCH_CALL,
    reference,
    top_two_gap,
    write_reference,
)
from mlx_lm.convert import convert  # noqa: E402
from mlx_lm.utils import load, quantize_model, save  # noqa: E402

PROMPT_LENGTH = 24
DECODE_STEPS = 16

# name: (architecture, mlx_lm.convert arguments). Together they cover every mode on linear
# layers, experts (gather_qmm), embeddings and tied heads (qwen3 ties its head), affine at 5 and
# 8 bits in groups of 32 and 64, and each mixed recipe. Hidden 64 lets every mode's group (16,
# 32, 64) divide every layer; no layer is 128 wide, so group 128 would quantize nothing.
FIXTURES = {
    # Dense, head tied to the embedding: linear, embedding lookup and tied head in each mode.
    "qwen3_affine_5bit_g32": ("qwen3", ["--q-bits", "5", "--q-group-size", "32"]),
    "qwen3_affine_8bit_g64": ("qwen3", ["--q-bits", "8", "--q-group-size", "64"]),
    "qwen3_mxfp4": ("qwen3", ["--q-mode", "mxfp4"]),
    "qwen3_mxfp8": ("qwen3", ["--q-mode", "mxfp8"]),
    "qwen3_nvfp4": ("qwen3", ["--q-mode", "nvfp4"]),
    # Experts through gather_qmm, an untied head, the routers' 8-bit affine overrides.
    "mixtral_mxfp4": ("mixtral", ["--q-mode", "mxfp4"]),
    "mixtral_mxfp8": ("mixtral", ["--q-mode", "mxfp8"]),
    "mixtral_nvfp4": ("mixtral", ["--q-mode", "nvfp4"]),
    # The mixed recipes: per-layer entries; without --q-group-size their group_size is null.
    "qwen3_mixed_2_6": ("qwen3", ["--quant-predicate", "mixed_2_6"]),
    "qwen3_mixed_3_4": ("qwen3", ["--quant-predicate", "mixed_3_4"]),
    "qwen3_mixed_3_6": ("qwen3", ["--quant-predicate", "mixed_3_6", "--q-group-size", "32"]),
    "qwen3_mixed_4_6": ("qwen3", ["--quant-predicate", "mixed_4_6"]),
    "mixtral_mixed_3_6": ("mixtral", ["--quant-predicate", "mixed_3_6"]),
}

# Made by mlx_lm.utils.quantize_model and save (what convert calls), with an argument convert
# does not pass.
GLOBAL_SCALE = {"mixtral_nvfp4_global_scale": "mixtral"}

# mlx_lm.convert's options, as its parser spells them, onto convert()'s parameters.
OPTIONS = {
    "--q-bits": ("q_bits", int),
    "--q-group-size": ("q_group_size", int),
    "--q-mode": ("q_mode", str),
    "--quant-predicate": ("quant_predicate", str),
}


def float_checkpoint(toolchain, arch, work):
    """toolchain/<arch>/hf without its reference logits (convert reads every *.safetensors as
    weights), under work/."""
    base = work / arch
    if base.exists():
        return base
    shutil.copytree(toolchain / arch / "hf", base)
    (base / "reference.safetensors").unlink()
    return base


def convert_arguments(args):
    kwargs = {"quantize": True}
    for flag, value in zip(args[::2], args[1::2]):
        name, kind = OPTIONS[flag]
        kwargs[name] = kind(value)
    return kwargs


def quantized_layers(directory):
    """Each quantized layer's mode, from the saved tensors: scales in the weights' float type are
    affine's; uint8 scales are one of the float modes, told apart by values per scale."""
    weights = mx.load(str(directory / "model.safetensors"))
    layers = {}
    for key in sorted(weights):
        if not key.endswith(".scales"):
            continue
        layer = key.removesuffix(".scales")
        packed, scales = weights[f"{layer}.weight"].shape[-1], weights[key].shape[-1]
        if weights[key].dtype != mx.uint8:
            layers[layer] = "affine"
        else:
            layers[layer] = {4: "mxfp4", 8: "mxfp8", 2: "nvfp4"}[packed // scales]
    return layers


def finish(name, directory, base, command, index):
    (directory / "README.md").unlink(missing_ok=True)
    config = json.loads((directory / "config.json").read_text())
    entry = {
        "from": f"tests/data/toolchain/{base}/hf",
        "made_by": command,
        "quantization": config["quantization"],
        "quantized_layers": quantized_layers(directory),
    }
    try:
        model, _ = load(str(directory))
        ref = reference(model, config, PROMPT_LENGTH, DECODE_STEPS)
    except Exception as error:  # mlx-lm's own failure is the record, never papered over
        # A TypeError lists the signatures between its first line and the call it got.
        lines = traceback.format_exception_only(error)[-1].strip().split("\n")
        entry["mlx_lm_fails"] = " ... ".join(dict.fromkeys([lines[0], lines[-1]]))
        print(f"{name}: mlx-lm fails: {entry['mlx_lm_fails']}")
    else:
        write_reference(directory, ref)
        entry["decoded"] = ref["decoded"].tolist()
        entry["min_top_two_gap"] = round(top_two_gap(ref), 6)
        print(f"{name}: decoded {entry['decoded']}")
    index[name] = entry


def make_converted(name, base_dir, base, args, out, index):
    directory = out / name
    convert(hf_path=str(base_dir), mlx_path=str(directory), **convert_arguments(args))
    command = " ".join(["mlx_lm.convert", "--hf-path", f"<{base}/hf>", "-q", *args])
    finish(name, directory, base, command, index)


def make_global_scale(name, base_dir, base, out, index):
    directory = out / name
    model, tokenizer, config = load(str(base_dir), return_config=True, lazy=True)
    model, config = quantize_model(model, config, None, None, mode="nvfp4", global_scale=True)
    save(directory, str(base_dir), model, tokenizer, config)
    # mlx-lm's own expert call, not mlx_reference.py's stand-in, so the failure is mlx-lm's.
    shimmed = QuantizedSwitchLinear.__call__
    QuantizedSwitchLinear.__call__ = MLX_LM_SWITCH_CALL
    try:
        command = f'quantize_model(model, config, None, None, mode="nvfp4", global_scale=True); save(...) of <{base}/hf>'
        finish(name, directory, base, command, index)
    finally:
        QuantizedSwitchLinear.__call__ = shimmed


def main():
    toolchain, out, *only = (Path(arg) for arg in sys.argv[1:])
    only = [str(name) for name in only]
    known = {**FIXTURES, **GLOBAL_SCALE}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise SystemExit(f"unknown fixtures: {unknown}")
    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "index.json"
    index = {"fixtures": {}}
    if only and index_path.exists():
        index = json.loads(index_path.read_text())
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        for name in known:
            if only and name not in only:
                continue
            shutil.rmtree(out / name, ignore_errors=True)
            if name in FIXTURES:
                base, args = FIXTURES[name]
                base_dir = float_checkpoint(toolchain, base, work)
                make_converted(name, base_dir, base, args, out, index["fixtures"])
            else:
                base = GLOBAL_SCALE[name]
                base_dir = float_checkpoint(toolchain, base, work)
                make_global_scale(name, base_dir, base, out, index["fixtures"])
    if not only:
        for stale in out.iterdir():
            if stale.is_dir() and stale.name not in known:
                shutil.rmtree(stale)
    index["mlx"] = version("mlx")
    index["mlx_lm"] = version("mlx-lm")
    index["fixtures"] = dict(sorted(index["fixtures"].items()))
    index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
