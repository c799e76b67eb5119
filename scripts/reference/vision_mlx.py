"""The mlx-vlm layouts of vision.py's checkpoints: `mlx_vlm.convert` of each `hf` folder in
float32 (`mlx`) and 4-bit (`mlx-q4`), with mlx-vlm's own preprocessing and logits.

Usage: vision_mlx.py SPEC.json IMAGES_DIR OUT_DIR [ARCH ...]

Runs in a venv of its own with mlx-vlm (regenerate.sh's vlm-venv). For each architecture in
SPEC.json with `mlx_cases` (all of them, or the ones named), OUT_DIR/<arch>/<layout>/ gets what
`mlx_vlm.convert` writes from OUT_DIR/<arch>/hf (its config.json spelled as the release's where
the spec's `release_spelling` says so, without vision.py's reference files), and
reference.safetensors and reference.json for each of those cases: the prompt from mlx-vlm's
`apply_chat_template` (thinking on, as transformers' default), its processor's token ids and
pixels (`prepare_inputs`), its M-RoPE positions (`get_rope_index`), its tower's output, the logits at every prompt position from one call of the model with a
fresh cache, and greedy steps through `generate_step`, each step's logits read by a logits
processor. OUT_DIR/index.json records, per layout, how far those are from transformers' in the
`hf` folder's reference, or the tool's error where it cannot make or run the layout.
"""

import json
import shutil
import sys
import tempfile
import traceback
from importlib.metadata import version
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_vlm.convert import convert
from mlx_vlm.generate.ar import generate_step
from mlx_vlm.prompt_utils import apply_chat_template
from mlx_vlm.utils import load, prepare_inputs
from safetensors.numpy import load_file

sys.path.insert(0, str(Path(__file__).parent))
from vision_spelling import release_spelled  # noqa: E402

# The most one architecture's layouts together may take in tests/data, as toolchain.py allows.
MAX_ARCHITECTURE_BYTES = 8 << 20


def image_paths(messages, images):
    return [
        str(images / part["image"])
        for message in messages
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image"
    ]


def transformers_masks(token_types, window):
    """transformers' Gemma 3 (and Gemma 4's sliding) prompt masks over `token_types` (1 at image tokens): a position
    sees its past and, among an image's tokens, the whole image; a sliding layer's also only
    keys after `position - window`. Each `[1, 1, L, L]`, true where a query sees a key."""
    image = np.asarray(token_types) == 1
    starts = image & ~np.concatenate([[False], image[:-1]])
    block = np.where(image, np.cumsum(starts) - 1, -1)
    query, key = np.arange(image.size)[:, None], np.arange(image.size)[None, :]
    seen = (key <= query) | ((block[:, None] == block[None, :]) & (block[:, None] >= 0))
    sliding = seen & (key > query - window)
    return mx.array(seen[None, None]), mx.array(sliding[None, None])


def run_gemma3_case(model, processor, messages, images, steps):
    """mlx-vlm's Gemma 3 for one chat, its tower, projector and text layers, with transformers'
    prompt mask and feature scale: mlx-vlm's own generation attends causally among an image's
    tokens, where the model (and transformers) lets them see each other, and one call of its
    model attends over the whole prompt both ways. Its prompt, inputs, tower output, prompt
    logits and greedy steps."""
    paths = image_paths(messages, images)
    prompt = apply_chat_template(processor, model.config, messages, num_images=len(paths))
    inputs = prepare_inputs(processor, images=paths, prompts=[prompt])
    input_ids, pixel_values = inputs["input_ids"], inputs["pixel_values"]
    hidden, _, _ = model.vision_tower(pixel_values.transpose(0, 2, 3, 1), output_hidden_states=True)
    features = model.multi_modal_projector(hidden)
    text = model.language_model
    # mlx-vlm divides the features by the square root of a top-level hidden_size (2048 where
    # the config has none, as the releases have none) before the text model multiplies every
    # embedding by its own: given the text model's, as transformers leaves the features as
    # they are.
    embeds, _ = model.prepare_inputs_for_multimodal(
        text.config.hidden_size,
        model.config.pad_token_id,
        model.config.image_token_index,
        features,
        text.model.embed_tokens(input_ids),
        input_ids,
        inputs["attention_mask"],
    )
    token_types = np.array(input_ids[0]) == model.config.image_token_index
    full, sliding = transformers_masks(token_types, text.config.sliding_window)
    cache = text.make_cache()
    pattern = text.config.sliding_window_pattern
    h = embeds * mx.array(text.config.hidden_size**0.5, mx.bfloat16).astype(embeds.dtype)
    for index, (layer, layer_cache) in enumerate(zip(text.model.layers, cache)):
        h = layer(h, full if index % pattern == pattern - 1 else sliding, layer_cache)
    prompt_logits = text.lm_head(text.model.norm(h))[0].astype(mx.float32)
    decoded, rows = [], []
    token = int(mx.argmax(prompt_logits[-1]))
    for _ in range(steps):
        decoded.append(token)
        logits = text(mx.array([[token]]), cache=cache).logits
        rows.append(np.array(logits[0, -1].astype(mx.float32)))
        token = int(np.argmax(rows[-1]))
    tensors = {
        "input_ids": np.array(input_ids[0]).astype(np.int32),
        "pixel_values": np.array(pixel_values).astype(np.float32),
        "image_features": np.array(features.reshape(-1, features.shape[-1]).astype(mx.float32)),
        "logits": np.array(prompt_logits),
        "decoded": np.array(decoded, dtype=np.int32),
        "decode_logits": np.stack(rows),
    }
    return tensors, prompt, tensors["logits"][-1]


def run_mistral3_case(model, processor, messages, images, steps):
    """mlx-vlm's answer for one chat with Mistral 3: its prompt, inputs, tower and projector
    output, the logits at every prompt position from one call of its model and greedy steps
    through `generate_step`."""
    paths = image_paths(messages, images)
    prompt = apply_chat_template(processor, model.config, messages, num_images=len(paths))
    inputs = prepare_inputs(processor, images=paths, prompts=[prompt])
    extra = {"image_sizes": inputs["image_sizes"]}
    input_ids, pixel_values = inputs["input_ids"], inputs["pixel_values"]
    *_, hidden_states = model.vision_tower(
        pixel_values.transpose(0, 2, 3, 1), output_hidden_states=True, image_sizes=inputs["image_sizes"]
    )
    selected = hidden_states[model.vision_feature_layer]
    features = model.multi_modal_projector(selected.squeeze(0), inputs["image_sizes"])
    out = model(input_ids, pixel_values, mask=inputs["attention_mask"], **extra)
    prompt_logits = np.array(out.logits[0].astype(mx.float32))
    rows = []

    def record(tokens, logits):
        rows.append(np.array(logits[0].astype(mx.float32)))
        return logits

    decoded = []
    for token, _ in generate_step(
        input_ids, model, pixel_values, inputs["attention_mask"], max_tokens=steps + 1,
        temperature=0.0, logits_processors=[record], **extra,
    ):
        decoded.append(int(token))
    tensors = {
        "input_ids": np.array(input_ids[0]).astype(np.int32),
        "pixel_values": np.array(pixel_values).astype(np.float32),
        "image_sizes": np.array(inputs["image_sizes"]).astype(np.int32),
        "image_features": np.array(features.reshape(-1, features.shape[-1]).astype(mx.float32)),
        "logits": prompt_logits,
        "decoded": np.array(decoded[:steps], dtype=np.int32),
        "decode_logits": np.stack(rows[1 : steps + 1]),
    }
    return tensors, prompt, rows[0]


def gemma4_patches(pixels, patch):
    """mlx-vlm's Gemma 4 pixels (`[images, 3, height, width]`, its tower cuts them) as
    transformers' processor hands them over: each image's patches row by row, each patch's
    pixels row by row with their channels (`[images, patches, values]`, padded with zeros to the
    largest image's), and each image's rows and columns of patches."""
    images, channels, height, width = pixels.shape
    rows, columns = height // patch, width // patch
    patches = pixels.reshape(images, channels, rows, patch, columns, patch)
    patches = patches.transpose(0, 2, 4, 3, 5, 1).reshape(images, rows * columns, -1)
    grid = np.array([[rows, columns]] * images, dtype=np.int32)
    return patches.astype(np.float32), grid


def run_gemma4_case(model, processor, messages, images, steps):
    """mlx-vlm's Gemma 4 for one chat, its tower, embedder and text layers, with transformers'
    prompt masks: mlx-vlm 0.7.10 lets an image's tokens see each other on the full-attention
    layers too, and on the sliding layers beyond the window, where transformers 5.23 keeps the
    full layers causal and the sliding layers within the window towards the past. Its prompt,
    inputs, tower and embedder output, the prompt logits from one call of the model with a fresh
    cache and greedy steps through that cache."""
    paths = image_paths(messages, images)
    prompt = apply_chat_template(processor, model.config, messages, num_images=len(paths))
    inputs = prepare_inputs(processor, images=paths, prompts=[prompt])
    pixel_values = inputs["pixel_values"]
    features = model.encode_image(pixel_values)
    text = model.language_model.model
    token_types = np.array(inputs["mm_token_type_ids"][0])
    _, sliding = transformers_masks(token_types, text.window_size)
    length = token_types.size
    causal = mx.array(np.tril(np.ones((length, length), dtype=bool))[None, None])
    own_masks = text._make_masks

    def prompt_masks(h, cache, mm_token_type_ids=None):
        if h.shape[1] != length:
            return own_masks(h, cache, mm_token_type_ids)
        return [causal if layer.layer_type == "full_attention" else sliding for layer in text.layers]

    text._make_masks = prompt_masks
    cache = model.language_model.make_cache()
    out = model(inputs["input_ids"], pixel_values, cache=cache)
    prompt_logits = np.array(out.logits[0].astype(mx.float32))
    decoded, rows = [], []
    token = int(np.argmax(prompt_logits[-1]))
    for _ in range(steps):
        decoded.append(token)
        logits = model.language_model(mx.array([[token]]), cache=cache).logits
        rows.append(np.array(logits[0, -1].astype(mx.float32)))
        token = int(np.argmax(rows[-1]))
    patches, grid = gemma4_patches(np.array(pixel_values), model.config.vision_config.patch_size)
    tensors = {
        "input_ids": np.array(inputs["input_ids"][0]).astype(np.int32),
        "pixel_values": patches,
        "image_grid": grid,
        "image_features": np.array(features.reshape(-1, features.shape[-1]).astype(mx.float32)),
        "logits": prompt_logits,
        "decoded": np.array(decoded, dtype=np.int32),
        "decode_logits": np.stack(rows),
    }
    return tensors, prompt, tensors["logits"][-1]


def run_case(model, processor, messages, images, steps):
    """mlx-vlm's answer for one chat: its prompt, inputs, prompt logits and greedy steps."""
    paths = image_paths(messages, images)
    prompt = apply_chat_template(
        processor, model.config, messages, num_images=len(paths), enable_thinking=True
    )
    inputs = prepare_inputs(processor, images=paths, prompts=[prompt])
    extra = {"image_grid_thw": inputs["image_grid_thw"]}
    positions, deltas = model.language_model.get_rope_index(
        inputs["input_ids"], inputs["image_grid_thw"], None, inputs["attention_mask"]
    )
    features, _ = model.vision_tower(inputs["pixel_values"], inputs["image_grid_thw"])
    out = model(inputs["input_ids"], inputs["pixel_values"], mask=inputs["attention_mask"], **extra)
    prompt_logits = np.array(out.logits[0].astype(mx.float32))

    rows = []

    def record(tokens, logits):
        rows.append(np.array(logits[0].astype(mx.float32)))
        return logits

    decoded = []
    for token, _ in generate_step(
        inputs["input_ids"],
        model,
        inputs["pixel_values"],
        inputs["attention_mask"],
        max_tokens=steps + 1,
        temperature=0.0,
        logits_processors=[record],
        **extra,
    ):
        decoded.append(int(token))
    # rows[0] is the last prompt position again, rows[i + 1] the logits after decoded[i].
    tensors = {
        "input_ids": np.array(inputs["input_ids"][0]).astype(np.int32),
        "pixel_values": np.array(inputs["pixel_values"]).astype(np.float32),
        "image_grid_thw": np.array(inputs["image_grid_thw"]).astype(np.int32),
        "position_ids": np.array(positions[:, 0]).astype(np.int32),
        "rope_deltas": np.array(deltas).reshape(-1).astype(np.int32),
        "image_features": np.array(features.astype(mx.float32)),
        "logits": prompt_logits,
        "decoded": np.array(decoded[:steps], dtype=np.int32),
        "decode_logits": np.stack(rows[1 : steps + 1]),
    }
    return tensors, prompt, rows[0]


def top_two_gap(rows):
    top = np.sort(rows, axis=-1)[:, -2:]
    return float((top[:, 1] - top[:, 0]).min())


def make_layout(arch, spec, tool_input, directory, quantize, images, hf_ref, hf_record):
    convert(
        hf_path=str(tool_input),
        mlx_path=str(directory),
        dtype="float32",
        quantize=quantize,
        q_bits=4,
        q_group_size=64,
    )
    model, processor = load(str(directory))
    tensors, record = {}, {"cases": {}}
    for case in arch["mlx_cases"]:
        messages = spec["cases"][case]
        if "system" in arch:
            messages = [{"role": "system", "content": arch["system"]}, *messages]
        runs = {"gemma3": run_gemma3_case, "gemma4": run_gemma4_case, "mistral3": run_mistral3_case}
        run = runs.get(arch.get("family"), run_case)
        case_tensors, prompt, last_row = run(model, processor, messages, images, spec["decode_steps"])
        tensors.update({f"{case}.{key}": value for key, value in case_tensors.items()})
        rows = np.concatenate([last_row[None], case_tensors["decode_logits"][:-1]])
        summary = {
            "messages": messages,
            "prompt": prompt,
            "tokens": int(case_tensors["input_ids"].size),
            "decoded": case_tensors["decoded"].tolist(),
            "min_top_two_gap": round(top_two_gap(rows), 6),
            "same_prompt_as_transformers": prompt == hf_record["cases"][case]["prompt"],
            "same_input_ids_as_transformers": bool(
                np.array_equal(case_tensors["input_ids"], hf_ref[f"{case}.input_ids"])
            ),
        }
        if case_tensors["pixel_values"].shape == hf_ref[f"{case}.pixel_values"].shape:
            pixels = np.abs(case_tensors["pixel_values"] - hf_ref[f"{case}.pixel_values"]).max()
            summary["pixel_values_max_abs_diff_to_transformers"] = float(pixels)
        for key in ("position_ids", "rope_deltas"):
            if key not in case_tensors:
                continue
            same = np.array_equal(case_tensors[key], hf_ref[f"{case}.{key}"])
            summary[f"same_{key}_as_transformers"] = same
        features = np.abs(case_tensors["image_features"] - hf_ref[f"{case}.image_features"]).max()
        summary["image_features_max_abs_diff_to_transformers"] = float(features)
        if case_tensors["logits"].shape == hf_ref[f"{case}.logits"].shape:
            logits = np.abs(case_tensors["logits"] - hf_ref[f"{case}.logits"]).max()
            summary["logits_max_abs_diff_to_transformers"] = float(logits)
        if summary["decoded"] == hf_record["cases"][case]["decoded"]:
            steps = np.abs(case_tensors["decode_logits"] - hf_ref[f"{case}.decode_logits"]).max()
            summary["decode_logits_max_abs_diff_to_transformers"] = float(steps)
        record["cases"][case] = summary
    metadata = {"mlx": version("mlx"), "mlx_vlm": version("mlx-vlm")}
    mx.save_safetensors(
        str(directory / "reference.safetensors"),
        {key: mx.array(value) for key, value in tensors.items()},
        metadata=metadata,
    )
    record["made_by"] = f"mlx_vlm.convert {version('mlx-vlm')}" + (" -q" if quantize else "")
    record["reference"] = f"mlx-vlm {version('mlx-vlm')}, mlx {version('mlx')}"
    (directory / "reference.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def make_architecture(name, arch, spec, images, out):
    hf_dir = out / name / "hf"
    hf_ref = load_file(str(hf_dir / "reference.safetensors"))
    hf_record = json.loads((hf_dir / "reference.json").read_text())
    layouts = {}
    with tempfile.TemporaryDirectory() as scratch:
        tool_input = release_spelled(arch, hf_dir, scratch)
        for layout, quantize in (("mlx", False), ("mlx-q4", True)):
            directory = out / name / layout
            shutil.rmtree(directory, ignore_errors=True)
            try:
                record = make_layout(arch, spec, tool_input, directory, quantize, images, hf_ref, hf_record)
            except Exception as error:  # a tool's failure is recorded, never papered over
                shutil.rmtree(directory, ignore_errors=True)
                last = traceback.format_exception_only(error)[-1].strip()
                layouts[layout] = {"not_made": f"mlx-vlm {version('mlx-vlm')}: {last}"}
                continue
            layouts[layout] = {
                key: value for key, value in record.items() if key != "cases"
            } | {
                "cases": {
                    case: {key: value for key, value in summary.items() if key not in ("messages", "prompt")}
                    for case, summary in record["cases"].items()
                }
            }
    size = sum(path.stat().st_size for path in (out / name).rglob("*") if path.is_file())
    if size > MAX_ARCHITECTURE_BYTES:
        raise SystemExit(f"{name}: {size} bytes of fixtures; shrink its config or its cases")
    entry = {"layouts": layouts}
    if "release_spelling" in arch:
        entry["release_spelling"] = arch["release_spelling"]["why"]
    return entry


def main():
    spec_path, images, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    only = sys.argv[4:]
    spec = json.loads(spec_path.read_text())
    index_path = out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"architectures": {}}
    for name, arch in spec["architectures"].items():
        if "mlx_cases" not in arch or (only and name not in only):
            continue
        index["architectures"][name] = make_architecture(name, arch, spec, images, out)
        for layout, record in index["architectures"][name]["layouts"].items():
            print(f"{name} {layout}: {json.dumps(record)[:400]}", flush=True)
    index["tools"] = {"mlx": version("mlx"), "mlx_vlm": version("mlx-vlm"), "transformers": version("transformers")}
    index["architectures"] = dict(sorted(index["architectures"].items()))
    index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
