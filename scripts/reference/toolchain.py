"""Each served architecture in every layout its users download, made by the tools that make
those files, with each layout's reference logits from its own implementation.

Usage: toolchain.py SPEC.json OUT_DIR LLAMA_CPP_PYTHON [ARCH ...]

LLAMA_CPP_PYTHON: the Python of a venv with llama-cpp-python's dependencies (its package and
llama.cpp come from build/llama-quantize/, see toolchain_gguf.py).

For each architecture in SPEC.json (all of them, or the ones named), OUT_DIR/<arch>/ gets:

- hf: the Hugging Face layout as transformers writes it. The config is the architecture's own
  transformers config class (`AutoConfig.for_model`) given only the spec's values (sizes scaled
  down, and the values of the release it mirrors where they differ from the class's defaults),
  so `save_pretrained` writes the key set that class writes for a release; the weights are
  transformers' own model (`from_config`, the ConditionalGeneration class for a wrapper with
  other towers), seeded, every parameter then redrawn so that each one matters to the logits.
  Its reference is transformers' forward pass (float32, eager attention).
- mlx: `mlx_lm.convert` of hf in float32, the mlx-community layout; reference: mlx-lm.
- mlx-q4: `mlx_lm.convert -q` (affine, 4 bits, group 64, the model's own quant predicate);
  reference: mlx-lm.
- gguf-f32, gguf-f16, gguf-q8_0, gguf-q4_k_m: llama.cpp's converter and quantizer on hf
  (toolchain_gguf.py); reference: llama.cpp.

A tool that cannot make a layout (mlx-lm has no such model, or fails on transformers' file) is
recorded in index.json with its error instead of a directory: never a hand-made stand-in.

reference.safetensors: `prompt` int32[P], `decoded` int32[D], `logits` float32[P+D, vocab].
Rows 0..P-1 come from one forward pass over the prompt with a fresh cache; then D greedy steps
through that cache, one token each: decoded[0] = argmax(row P-1), row P+i = the logits after
feeding decoded[i], decoded[i+1] = argmax(row P+i). index.json lists, per architecture, the
release it mirrors, each layout's model_type, its reference's smallest top-two gap over the
greedy steps, and how far mlx-lm's float logits are from transformers' on the same weights.
"""

import json
import shutil
import sys
import tempfile
import traceback
from importlib.metadata import version
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
import sentencepiece
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import AutoConfig, PreTrainedTokenizerFast

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).parent))
from mlx_reference import prompt_ids, reference as mlx_reference  # noqa: E402
from toolchain_gguf import make_gguf  # noqa: E402
from mlx_lm.convert import convert  # noqa: E402
from mlx_lm.utils import load as mlx_load  # noqa: E402

# The scale of the noise added to 1-D parameters (norms, biases, sinks, gates), which
# transformers initializes to constants, so that each one changes the logits.
CONSTANT_NOISE = 0.5

# The most one architecture's layouts may take in tests/data.
MAX_ARCHITECTURE_BYTES = 8 << 20

# What the tests allow between two float32 implementations of one model.
FLOAT_TOLERANCE = 1e-3


def vocab_size(config):
    text = getattr(config, "text_config", None) or config
    return text.vocab_size


def build_config(spec):
    values = json.loads(json.dumps(spec["config"]))
    model_type = values.pop("model_type")
    return AutoConfig.for_model(model_type, **values)


def model_class(spec):
    name = spec.get("model_class", "AutoModelForCausalLM")
    return getattr(transformers, name)


def redraw(model, seed):
    """Every parameter from a seeded draw: matrices uniform in ±1/sqrt(fan-in), vectors and
    scalars their initial value plus noise."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in sorted(model.named_parameters()):
            if "embed" in name:
                # As MLX draws an embedding: the rows spread, so tokens differ.
                parameter.copy_(torch.randn(parameter.shape, generator=generator))
            elif parameter.ndim >= 2:
                bound = 1 / parameter.shape[-1] ** 0.5
                draw = torch.rand(parameter.shape, generator=generator) * 2 - 1
                parameter.copy_(draw * bound)
            else:
                noise = torch.randn(parameter.shape, generator=generator)
                parameter.add_(CONSTANT_NOISE * noise)


def tokenizer(size, specials=()):
    """A byte-level BPE of `size` tokens (GPT-2's pre-tokenizer and byte alphabet, cut down to
    the printable ASCII bytes, a few merges, an end token and the family's own `specials`,
    which llama.cpp's converter looks up for some families): mlx_lm.convert copies a
    tokenizer, and llama.cpp's converter and loader want BPE merges; the logits tests feed
    token ids."""
    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    # GPT-2's byte-to-character table maps the printable ASCII bytes to themselves, except
    # the space, which becomes "Ġ".
    printable = ["\u0120" if b == 0x20 else chr(b) for b in range(0x20, 0x7F)]
    assert set(printable) <= set(byte_chars)
    letters = "abcdefghijklmnopqrstuvwxyz"
    pairs = [("\u0120", c) for c in letters] + [tuple(p) for p in ("th", "he", "in", "er", "an", "re")]
    pairs = pairs[: size - len(printable) - 1 - len(specials)]
    vocab = {token: i for i, token in enumerate(printable + ["".join(p) for p in pairs])}
    core = Tokenizer(models.BPE(vocab, pairs))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(["<|endoftext|>", *specials])
    assert core.get_vocab_size() == size
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>")


def sentencepiece_bpe(size):
    """A SentencePiece-style BPE in tokenizer.json as Gemma's releases ship theirs (spaces as
    "\u2581", byte fallback to `<0xNN>` tokens, a `Sequence` decoder), which llama.cpp's converter
    reads through gguf-py's `LlamaHfVocab` (Gemma 4) and refuses from a byte-level BPE."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(0x09, 0x0E)]
    characters = ["\u2581"] + [chr(c) for c in range(0x21, 0x7F)]
    letters = "abcdefghijklmnopqrstuvwxyz"
    pairs = [("\u2581", c) for c in letters] + [tuple(p) for p in ("th", "he", "in", "er", "an", "re")]
    base = specials + byte_tokens + characters
    pairs = pairs[: size - len(base)]
    vocab = {token: i for i, token in enumerate(base + ["".join(p) for p in pairs])}
    core = Tokenizer(models.BPE(vocab, pairs, unk_token="<unk>", byte_fallback=True))
    core.normalizer = normalizers.Replace(" ", "\u2581")
    core.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    core.add_special_tokens(specials)
    assert core.get_vocab_size() == size
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
    )


def sentencepiece_model(size, directory):
    """A SentencePiece model (`tokenizer.model`) trained by the sentencepiece library on a few
    lines of text, as ERNIE 4.5's releases ship theirs: llama.cpp's converter reads only that file
    for them. Smaller than `size`; the converter pads the vocabulary to the config's."""
    lines = [
        "the quick brown fox jumps over the lazy dog",
        "pack my box with five dozen liquor jugs",
        "sphinx of black quartz, judge my vow!",
        "0123456789 + - * / = ( ) [ ] { } < > ; : ' \" ? . , _ # @ $ % ^ & | ~ `",
    ]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 8),
        model_prefix=str(directory / "tokenizer"),
        model_type="bpe",
        vocab_size=size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        byte_fallback=False,
        minloglevel=2,
    )
    (directory / "tokenizer.vocab").unlink()
    json.dump(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_prefix_space": False},
        open(directory / "tokenizer_config.json", "w"),
        indent=1,
    )


def save_tokenizer(spec, config, directory):
    """The tokenizer of the kind the mirrored release ships (`tokenizer` in the spec)."""
    size = vocab_size(config)
    kind = spec.get("tokenizer", "byte_level_bpe")
    if kind == "byte_level_bpe":
        tokenizer(size, spec.get("special_tokens", ())).save_pretrained(directory)
    elif kind == "sentencepiece_bpe":
        sentencepiece_bpe(size).save_pretrained(directory)
    elif kind == "sentencepiece_model":
        sentencepiece_model(size, directory)
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}")
    if "tokenizer_class" in spec:
        # The class the release's tokenizer_config.json names, where llama.cpp's converter
        # picks the vocabulary's reader by it (Phi-4-mini's GPT2Tokenizer).
        path = directory / "tokenizer_config.json"
        settings = json.loads(path.read_text())
        settings["tokenizer_class"] = spec["tokenizer_class"]
        path.write_text(json.dumps(settings, indent=2) + "\n")


def hf_reference(model, vocab, prompt_length, decode_steps):
    prompt = prompt_ids(prompt_length, vocab)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        rows = [out.logits[0].float()]
        past = out.past_key_values
        decoded = []
        token = int(rows[-1][-1].argmax())
        for _ in range(decode_steps):
            decoded.append(token)
            out = model(input_ids=torch.tensor([[token]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            rows.append(out.logits[0].float())
            token = int(rows[-1][-1].argmax())
    return {
        "prompt": torch.tensor(prompt, dtype=torch.int32),
        "decoded": torch.tensor(decoded, dtype=torch.int32),
        "logits": torch.cat(rows, dim=0).contiguous(),
    }


def top_two_gap(logits, steps):
    rows = logits[-steps - 1 : -1]
    top = torch.topk(rows, 2, dim=-1).values
    return float((top[:, 0] - top[:, 1]).min())


def save_hf(spec, directory):
    """transformers' model of `spec`, seeded and redrawn, saved with its tokenizer as transformers
    saves it; returns its config and the model."""
    config = build_config(spec)
    torch.manual_seed(spec["seed"])
    model = model_class(spec).from_config(config, dtype=torch.float32, attn_implementation="eager")
    redraw(model, spec["seed"])
    model.eval()
    model.save_pretrained(directory, save_original_format=spec.get("save_original_format", True))
    save_tokenizer(spec, config, directory)
    return config, model


def make_hf(spec, directory, prompt_length, decode_steps):
    config, model = save_hf(spec, directory)
    ref = hf_reference(model, vocab_size(config), prompt_length, decode_steps)
    metadata = {"transformers": transformers.__version__, "torch": torch.__version__}
    save_file(ref, str(directory / "reference.safetensors"), metadata=metadata)
    return ref


def make_mlx(hf_dir, directory, prompt_length, decode_steps, quantize):
    convert(
        hf_path=str(hf_dir),
        mlx_path=str(directory),
        dtype="float32",
        quantize=quantize,
        q_bits=4,
        q_group_size=64,
    )
    model, _ = mlx_load(str(directory))
    config = json.loads((directory / "config.json").read_text())
    vocab = config.get("text_config", config)["vocab_size"]
    ref = mlx_reference(model, config, prompt_length, decode_steps)
    metadata = {"mlx": version("mlx"), "mlx_lm": version("mlx-lm")}
    mx.save_safetensors(str(directory / "reference.safetensors"), ref, metadata=metadata)
    assert ref["logits"].shape[-1] == vocab
    return torch.tensor(ref["logits"].tolist()), [int(t) for t in ref["decoded"].tolist()]


def transformers_decides(entry, float_logits, q4_logits, prompt_length):
    """mlx-lm's float logits departed from transformers' on the same weights: both mlx layouts
    are then held to transformers' reference, the 4-bit one within twice the noise quantization
    puts on mlx-lm's own prompt logits."""
    mlx, q4 = entry["layouts"]["mlx"], entry["layouts"].get("mlx-q4", {})
    mlx["reference_layout"] = "hf"
    mlx["mlx_lm_is_wrong"] = "its logits depart from transformers' on the same weights"
    if "not_made" not in q4 and q4_logits is not None:
        noise = float((q4_logits[:prompt_length] - float_logits[:prompt_length]).abs().max())
        q4["reference_layout"] = "hf"
        q4["quantization_bound"] = round(2 * noise, 4)


def release_spelled(spec, hf_dir, scratch):
    """The `hf` folder with its config.json spelled as the mirrored release's, for the tools that
    read only that spelling (mlx_lm.convert, which made mlx-community's conversions from those
    files, and llama.cpp's converter): transformers 5 renames some keys and values on save.
    `release_spelling` in the spec says how, and why: `rope_theta_at_top_level` moves
    `rope_parameters` back to `rope_theta`, `partial_rotary_factor` and `rope_scaling`, as
    transformers 4 wrote every release before; `renamed_keys` restores a key's old name,
    `release_keys` adds a key transformers 5 no longer writes with the release's value, and
    `values` maps a key's values back. Applied to a wrapper's `text_config` as to the top
    level. `hf_dir` itself when the spec has none."""
    spelling = spec.get("release_spelling")
    if spelling is None:
        return hf_dir
    copy = Path(scratch) / "hf"
    shutil.copytree(hf_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    text = config.get("text_config", config)
    if spelling.get("rope_theta_at_top_level"):
        parameters = dict(text.pop("rope_parameters"))
        text["rope_theta"] = parameters.pop("rope_theta")
        if "partial_rotary_factor" in parameters:
            text["partial_rotary_factor"] = parameters.pop("partial_rotary_factor")
        text["rope_scaling"] = None if parameters.get("rope_type") == "default" else parameters
    for old, new in spelling.get("renamed_keys", {}).items():
        text[new] = text.pop(old)
    text.update(spelling.get("release_keys", {}))
    for key, renames in spelling.get("values", {}).items():
        value = text[key]
        text[key] = [renames.get(item, item) for item in value] if isinstance(value, list) \
            else renames.get(value, value)
    (copy / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return copy


def make_architecture(name, spec, out, prompt_length, decode_steps, llama_python):
    with tempfile.TemporaryDirectory() as scratch:
        return make_layouts(name, spec, out, prompt_length, decode_steps, llama_python, scratch)


def make_layouts(name, spec, out, prompt_length, decode_steps, llama_python, scratch):
    arch_dir = out / name
    shutil.rmtree(arch_dir, ignore_errors=True)
    arch_dir.mkdir(parents=True)
    entry = {"mirrors": spec["mirrors"], "layouts": {}}
    hf_dir = arch_dir / "hf"
    ref = make_hf(spec, hf_dir, prompt_length, decode_steps)
    hf_config = json.loads((hf_dir / "config.json").read_text())
    entry["model_type"] = hf_config["model_type"]
    entry["layouts"]["hf"] = {
        "made_by": f"transformers {transformers.__version__}",
        "reference": "transformers",
        "decoded": ref["decoded"].tolist(),
        "min_top_two_gap": round(top_two_gap(ref["logits"], decode_steps), 6),
    }
    made = {}
    tool_input = release_spelled(spec, hf_dir, scratch)
    if tool_input != hf_dir:
        entry["release_spelling"] = spec["release_spelling"]["why"]
    for layout, quantize in (("mlx", False), ("mlx-q4", True)):
        directory = arch_dir / layout
        try:
            logits, decoded = make_mlx(tool_input, directory, prompt_length, decode_steps, quantize)
        except Exception as error:  # a tool's failure is recorded, never papered over
            shutil.rmtree(directory, ignore_errors=True)
            last = traceback.format_exception_only(error)[-1].strip()
            entry["layouts"][layout] = {"not_made": f"mlx-lm {version('mlx-lm')}: {last}"}
            continue
        made[layout] = logits
        record = {
            "made_by": f"mlx_lm.convert {version('mlx-lm')}" + (" -q" if quantize else ""),
            "reference": "mlx-lm",
            "decoded": decoded,
            "min_top_two_gap": round(top_two_gap(logits, decode_steps), 6),
        }
        if not quantize:
            record["max_abs_diff_to_transformers"] = float((logits - ref["logits"]).abs().max())
        entry["layouts"][layout] = record
    size = sum(path.stat().st_size for path in arch_dir.rglob("*") if path.is_file())
    if size > MAX_ARCHITECTURE_BYTES:
        # A tower left at its class's default size: the fixtures must stay tiny.
        raise SystemExit(f"{name}: {size} bytes of fixtures; shrink its config")
    departed = entry["layouts"]["mlx"].get("max_abs_diff_to_transformers", 0) > FLOAT_TOLERANCE
    # mlx_lm.convert may leave out a tensor on purpose (`mlx_drops` says which and why): the
    # file then holds less than the hf folder, and mlx-lm's answer is the only one it gives.
    if departed and "mlx_drops" in spec:
        entry["layouts"]["mlx"]["mlx_drops"] = spec["mlx_drops"]
    elif departed:
        transformers_decides(entry, made["mlx"], made.get("mlx-q4"), prompt_length)
    make_gguf(entry, tool_input, arch_dir, ref, llama_python, decode_steps, top_two_gap, FLOAT_TOLERANCE)
    return entry


def main():
    spec_path, out, llama_python = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    only = sys.argv[4:]
    spec = json.loads(spec_path.read_text())
    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"architectures": {}}
    for name, arch in spec["architectures"].items():
        if only and name not in only:
            continue
        print(f"{name} ({arch['mirrors']})", flush=True)
        try:
            index["architectures"][name] = make_architecture(
                name, arch, out, spec["prompt_length"], spec["decode_steps"], llama_python
            )
        except Exception as error:  # transformers itself cannot make it: say so
            last = traceback.format_exception_only(error)[-1].strip()
            print(f"  not made: {last}", flush=True)
            index["architectures"][name] = {"mirrors": arch["mirrors"], "not_made": last}
            continue
        for layout, record in index["architectures"][name]["layouts"].items():
            summary = record.get("not_made") or {
                key: value for key, value in record.items() if key not in ("decoded", "made_by")
            }
            print(f"  {layout}: {str(summary)[:300]}", flush=True)
    index["tools"] = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "mlx": version("mlx"),
        "mlx_lm": version("mlx-lm"),
        "llama_cpp": "llama-cpp-python 0.3.36's llama.cpp",
    }
    index["architectures"] = dict(sorted(index["architectures"].items()))
    # What the tools cannot make, and what they make but corral does not yet serve as they do:
    # the test accepts a served architecture without layouts only when it is named here.
    index["cannot_make"] = spec.get("cannot_make", {})
    index["pending"] = {name: arch["why"] for name, arch in spec.get("pending", {}).items()}
    # llama.cpp architectures its converter writes that corral does not yet load, each with why.
    index["pending_gguf"] = spec.get("pending_gguf", {})
    index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
