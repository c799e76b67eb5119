"""Checkpoints quantized by mlx-lm in each of its modes and recipes, with mlx-lm's logits.

Usage: quant_modes.py ARCHITECTURES_DIR OUT_DIR [NAME ...]

Each fixture starts from a float32 checkpoint in ARCHITECTURES_DIR (`<arch>/f32`, the
mlx-community layout architectures.py writes) and is made by `mlx_lm.convert` itself (its
`convert()`, called with the arguments its command line passes), into OUT_DIR/<name>/ as convert
writes it (config.json, model.safetensors and its index, the tokenizer it copies; the model card
is dropped). convert needs a tokenizer to copy, so the float checkpoint gets a word-level one of
its vocabulary first (the tests feed ids).

Each fixture that mlx-lm can run gets reference.safetensors in architectures.py's format (its
`reference()`: `prompt` int32[24], `decoded` int32[16], `logits` float32[40, vocab], one pass
over the prompt through make_prompt_cache, then 16 greedy steps) from the model as `mlx_lm.load`
reads it back. One that mlx-lm cannot run on this MLX (nvfp4 experts with a per-expert global
scale: mlx-lm's `quantize_model(global_scale=True)`, which convert does not offer) gets no
reference; index.json records mlx-lm's own failure for it.

OUT_DIR/index.json: per fixture, the float checkpoint it came from, the command line that made
it, config.json's `quantization`, which weights are quantized in which mode, the decoded tokens
and smallest top-two gap, or `mlx_lm_fails` with mlx-lm's error.
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

# mlx-lm's own expert call, before architectures.py replaces it (see _without_global_scale).
MLX_LM_SWITCH_CALL = QuantizedSwitchLinear.__call__

sys.path.insert(0, str(Path(__file__).parent))
from architectures import reference, top_two_gap, write_reference  # noqa: E402
from mlx_lm.convert import convert  # noqa: E402
from mlx_lm.utils import load, quantize_model, save  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

PROMPT_LENGTH = 24
DECODE_STEPS = 16

# name: (float checkpoint, mlx_lm.convert arguments). Together they cover every mode on linear
# layers, experts (gather_qmm), embeddings and tied heads, every affine bit count and group
# size, and each mixed recipe. Hidden 64 lets every mode's group (16, 32, 64) divide every
# layer; group 128 fits only qwen3's o_proj (4 heads of 32), so only it quantizes there.
FIXTURES = {
    # Dense, head tied to the embedding: linear, embedding lookup and tied head in each mode.
    "llama_affine_5bit_g32": ("llama", ["--q-bits", "5", "--q-group-size", "32"]),
    "llama_mxfp4": ("llama", ["--q-mode", "mxfp4"]),
    "llama_mxfp8": ("llama", ["--q-mode", "mxfp8"]),
    "llama_nvfp4": ("llama", ["--q-mode", "nvfp4"]),
    "qwen3_affine_8bit_g128": ("qwen3", ["--q-bits", "8", "--q-group-size", "128"]),
    # Experts through gather_qmm, untied heads, the routers' 8-bit affine overrides.
    "gpt_oss_mxfp4": ("gpt_oss", ["--q-mode", "mxfp4"]),
    "qwen3_moe_mxfp8": ("qwen3_moe", ["--q-mode", "mxfp8"]),
    "qwen3_moe_nvfp4": ("qwen3_moe", ["--q-mode", "nvfp4"]),
    # Latent attention's per-head projections (MultiLinear) in a float mode.
    "deepseek_v3_mxfp4": ("deepseek_v3", ["--q-mode", "mxfp4"]),
    # The mixed recipes: per-layer entries; without --q-group-size their group_size is null.
    "llama_mixed_2_6": ("llama", ["--quant-predicate", "mixed_2_6"]),
    "llama_mixed_3_4": ("llama", ["--quant-predicate", "mixed_3_4"]),
    "llama_mixed_3_6": ("llama", ["--quant-predicate", "mixed_3_6", "--q-group-size", "32"]),
    "llama_mixed_4_6": ("llama", ["--quant-predicate", "mixed_4_6"]),
    "qwen3_moe_mixed_3_6": ("qwen3_moe", ["--quant-predicate", "mixed_3_6"]),
}

# Made by mlx_lm.utils.quantize_model and save (what convert calls), with an argument convert
# does not pass.
GLOBAL_SCALE = {"qwen3_moe_nvfp4_global_scale": "qwen3_moe"}

# mlx_lm.convert's options, as its parser spells them, onto convert()'s parameters.
OPTIONS = {
    "--q-bits": ("q_bits", int),
    "--q-group-size": ("q_group_size", int),
    "--q-mode": ("q_mode", str),
    "--quant-predicate": ("quant_predicate", str),
}


def float_checkpoint(architectures, arch, work):
    """architectures/<arch>/f32 with a tokenizer for convert to copy, under work/."""
    base = work / arch
    if base.exists():
        return base
    shutil.copytree(architectures / arch / "f32", base)
    (base / "reference.safetensors").unlink(missing_ok=True)
    vocab = json.loads((base / "config.json").read_text())["vocab_size"]
    core = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="t0", eos_token="t1")
    tokenizer.save_pretrained(base)
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
        "from": f"tests/data/architectures/{base}/f32",
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
    command = " ".join(["mlx_lm.convert", "--hf-path", f"<{base}/f32>", "-q", *args])
    finish(name, directory, base, command, index)


def make_global_scale(name, base_dir, base, out, index):
    directory = out / name
    model, tokenizer, config = load(str(base_dir), return_config=True, lazy=True)
    model, config = quantize_model(model, config, None, None, mode="nvfp4", global_scale=True)
    save(directory, str(base_dir), model, tokenizer, config)
    # mlx-lm's own expert call, not architectures.py's stand-in, so the failure is mlx-lm's.
    shimmed = QuantizedSwitchLinear.__call__
    QuantizedSwitchLinear.__call__ = MLX_LM_SWITCH_CALL
    try:
        command = f'quantize_model(model, config, None, None, mode="nvfp4", global_scale=True); save(...) of <{base}/f32>'
        finish(name, directory, base, command, index)
    finally:
        QuantizedSwitchLinear.__call__ = shimmed


def main():
    architectures, out, *only = (Path(arg) for arg in sys.argv[1:])
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
                base_dir = float_checkpoint(architectures, base, work)
                make_converted(name, base_dir, base, args, out, index["fixtures"])
            else:
                base = GLOBAL_SCALE[name]
                base_dir = float_checkpoint(architectures, base, work)
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
