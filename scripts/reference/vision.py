"""Qwen3.5's vision-language checkpoints with random weights, as transformers writes them, with
transformers' own preprocessing, positions, vision features and logits for chats with images.

Usage: vision.py SPEC.json IMAGES_DIR OUT_DIR [ARCH ...]

For each architecture in SPEC.json (all of them, or the ones named), OUT_DIR/<arch>/hf/ gets:

- the checkpoint: the architecture's transformers config class given only the spec's values,
  its ConditionalGeneration model (vision tower and text model), seeded, every parameter then
  redrawn as toolchain.py does so that each one matters, saved in float32;
- the processor as `Qwen3VLProcessor.save_pretrained` writes it: the tokenizer (a byte-level BPE
  whose added tokens are the ones the Qwen3.6 release's chat template writes, special or not as
  the release has them), that template, and the image processor's config (the release's
  values with the patch size and pixel limits scaled down, `why_pixel_limits` in the spec). The
  PIL backend (`Qwen2VLImageProcessorPil`) is the reference, as on a machine without
  torchvision; the video processor needs torchvision and is left out;
- reference.safetensors and reference.json: for each of the architecture's cases (chats with
  images, spec `cases`) the processor's token ids and pixels, transformers' M-RoPE positions,
  the vision tower's merged output, the logits at every prompt position and greedy decode
  steps; and for each image alone the processor's pixels and grid. tests/data/vision/README.md
  names every tensor.

All on the CPU in float32, eager attention.
"""

import json
import shutil
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForImageTextToText, PreTrainedTokenizerFast
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

sys.path.insert(0, str(Path(__file__).parent))
from toolchain import redraw  # noqa: E402

# The most one architecture's folder may take in tests/data.
MAX_ARCHITECTURE_BYTES = 4 << 20

# The Qwen3.5 release's added tokens that its chat template writes: the chat and vision markers
# are special (skipped when decoding), the reasoning and tool tags are not, as in the release's
# tokenizer_config.json.
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>"]
SPECIAL += ["<|image_pad|>", "<|video_pad|>"]
PLAIN = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def tokenizer(size):
    """A byte-level BPE of `size` tokens: the printable ASCII bytes, merges to fill, then the
    end-of-text token and the release's added tokens last."""
    printable = ["\u0120" if b == 0x20 else chr(b) for b in range(0x20, 0x7F)]
    letters = "abcdefghijklmnopqrstuvwxyz"
    common = ["th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te"]
    common += ["is", "it", "al", "ar", "st", "to", "nt", "ng", "se", "ha", "ou", "le", "ic", "ur"]
    pairs = [("\u0120", c) for c in letters] + [tuple(p) for p in common]
    pairs = pairs[: size - len(printable) - 1 - len(SPECIAL) - len(PLAIN)]
    vocab = {token: i for i, token in enumerate(printable + ["".join(p) for p in pairs])}
    core = Tokenizer(models.BPE(vocab, pairs))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(["<|endoftext|>", *SPECIAL])
    core.add_tokens(PLAIN)
    assert core.get_vocab_size() == size, core.get_vocab_size()
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def build_config(spec, tok):
    values = json.loads(json.dumps(spec["config"]))
    ids = {
        "image_token_id": "<|image_pad|>",
        "video_token_id": "<|video_pad|>",
        "vision_start_token_id": "<|vision_start|>",
        "vision_end_token_id": "<|vision_end|>",
    }
    for key, token in ids.items():
        values[key] = tok.convert_tokens_to_ids(token)
    values["text_config"]["eos_token_id"] = tok.eos_token_id
    values["text_config"]["pad_token_id"] = tok.pad_token_id
    return AutoConfig.for_model(values.pop("model_type"), **values)


def with_paths(messages, images):
    """The spec's messages with each image part's file name made a path the processor opens."""
    out = json.loads(json.dumps(messages))
    for message in out:
        if isinstance(message["content"], list):
            for part in message["content"]:
                if part["type"] == "image":
                    part["image"] = str(images / part["image"])
    return out


def top_two_gap(rows):
    top = torch.topk(rows, 2, dim=-1).values
    return float((top[:, 0] - top[:, 1]).min())


def run_case(model, processor, messages, steps):
    """Transformers' answer for one chat: the processor's inputs, positions, vision features,
    prompt logits and `steps` greedy steps through the cache."""
    inputs = processor.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    inner = model.model
    inner.rope_deltas = None
    with torch.no_grad():
        positions, deltas = inner.get_rope_index(
            inputs["input_ids"], inputs["mm_token_type_ids"], image_grid_thw=inputs["image_grid_thw"]
        )
        features = inner.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"]).pooler_output
        out = model(**inputs, use_cache=True)
        prompt_logits = out.logits[0].float()
        past = out.past_key_values
        decoded, rows = [], []
        token = int(prompt_logits[-1].argmax())
        for _ in range(steps):
            decoded.append(token)
            out = model(input_ids=torch.tensor([[token]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            rows.append(out.logits[0, -1].float())
            token = int(rows[-1].argmax())
    tensors = {
        "input_ids": inputs["input_ids"][0].to(torch.int32),
        "pixel_values": inputs["pixel_values"].float(),
        "image_grid_thw": inputs["image_grid_thw"].to(torch.int32),
        "position_ids": positions[:, 0].to(torch.int32),
        "rope_deltas": deltas[0].to(torch.int32),
        "image_features": torch.cat(features, dim=0).float(),
        "logits": prompt_logits,
        "decoded": torch.tensor(decoded, dtype=torch.int32),
        "decode_logits": torch.stack(rows),
    }
    decode_rows = torch.cat([prompt_logits[-1:], tensors["decode_logits"][:-1]])
    summary = {
        "prompt": processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
        "tokens": int(tensors["input_ids"].numel()),
        "image_grid_thw": tensors["image_grid_thw"].tolist(),
        "rope_deltas": int(tensors["rope_deltas"][0]),
        "decoded": decoded,
        "min_top_two_gap": round(top_two_gap(decode_rows), 6),
    }
    return tensors, summary


class Qwen3VLProcessor(transformers.Qwen3VLProcessor):
    """transformers' Qwen3VLProcessor without its video processor, which needs torchvision:
    images and text take the same path through it. Same name, so the saved `processor_class`
    is the release's."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)


def make_processor(spec, tok, template):
    image_processor = Qwen2VLImageProcessorPil(**spec["image_processor"])
    return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tok, chat_template=template)


def save_processor(processor, directory):
    """The processor's files as a release has them: transformers 5's `save_pretrained` writes
    the tokenizer and chat_template.jinja, but the image processor's settings nested in a
    processor_config.json; the releases (saved by transformers 4) have them flat in
    preprocessor_config.json, as the image processor's own `save_pretrained` writes it."""
    processor.save_pretrained(directory)
    (directory / "processor_config.json").unlink()
    processor.image_processor.save_pretrained(directory)
    path = directory / "preprocessor_config.json"
    settings = json.loads(path.read_text())
    settings["processor_class"] = type(processor).__name__
    path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def make_architecture(name, arch, spec, root, images, out):
    hf_dir = out / name / "hf"
    shutil.rmtree(hf_dir.parent, ignore_errors=True)
    hf_dir.mkdir(parents=True)
    tok = tokenizer(arch["config"]["text_config"]["vocab_size"])
    processor = make_processor(spec, tok, (root / spec["chat_template"]).read_text())
    config = build_config(arch, tok)
    torch.manual_seed(arch["seed"])
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32, attn_implementation="eager")
    redraw(model, arch["seed"])
    model.eval()
    model.save_pretrained(hf_dir, save_original_format=False)
    save_processor(processor, hf_dir)

    tensors = {}
    record = {"mirrors": arch["mirrors"], "model_type": config.model_type, "cases": {}, "images": {}}
    for case in arch["cases"]:
        messages = spec["cases"][case]
        case_tensors, summary = run_case(model, processor, with_paths(messages, images), spec["decode_steps"])
        tensors.update({f"{case}.{key}": value for key, value in case_tensors.items()})
        record["cases"][case] = {"messages": messages, **summary}
    for file in spec["images"]:
        alone = processor.image_processor(images=[str(images / file)], return_tensors="pt")
        stem = Path(file).stem
        tensors[f"image.{stem}.pixel_values"] = alone["pixel_values"].float()
        tensors[f"image.{stem}.image_grid_thw"] = alone["image_grid_thw"].to(torch.int32)
        record["images"][file] = {"image_grid_thw": alone["image_grid_thw"].tolist()}
    metadata = {"transformers": transformers.__version__, "torch": torch.__version__}
    tensors = {key: value.contiguous() for key, value in tensors.items()}
    save_file(tensors, str(hf_dir / "reference.safetensors"), metadata=metadata)
    record["made_by"] = f"transformers {transformers.__version__}, torch {torch.__version__}"
    (hf_dir / "reference.json").write_text(json.dumps(record, indent=1) + "\n")
    size = sum(path.stat().st_size for path in hf_dir.rglob("*") if path.is_file())
    if size > MAX_ARCHITECTURE_BYTES:
        raise SystemExit(f"{name}: {size} bytes of fixtures; shrink its config or its cases")
    return record


def main():
    spec_path, images, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    only = sys.argv[4:]
    spec = json.loads(spec_path.read_text())
    root = spec_path.resolve().parents[2]
    for name, arch in spec["architectures"].items():
        if only and name not in only:
            continue
        record = make_architecture(name, arch, spec, root, images, out)
        for case, summary in record["cases"].items():
            print(f"{name} {case}: {summary['tokens']} tokens, grids {summary['image_grid_thw']}, "
                  f"decoded {summary['decoded']}, gap {summary['min_top_two_gap']}", flush=True)


if __name__ == "__main__":
    main()
