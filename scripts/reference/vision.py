"""Vision-language checkpoints with random weights (Qwen3.5's, Gemma 3's, Gemma 4's and
Mistral 3's), as transformers
writes them, with transformers' own preprocessing, positions, vision features and logits for
chats with images.

Usage: vision.py SPEC.json IMAGES_DIR OUT_DIR [ARCH ...]

For each architecture in SPEC.json (all of them, or the ones named), OUT_DIR/<arch>/hf/ gets:

- the checkpoint: the architecture's transformers config class given only the spec's values,
  its ConditionalGeneration model (vision tower and text model), seeded, every parameter then
  redrawn as toolchain.py does so that each one matters, saved in float32;
- the processor as the family's processor class saves it: the tokenizer (a byte-level BPE
  whose added tokens are the ones the release's chat template and processor write, special or
  not as the release has them), that template, and the image processor's config (the release's
  values scaled down, `why_pixel_limits` / `why_image_size` in the spec). The PIL backend
  (`Qwen2VLImageProcessorPil`, `Gemma3ImageProcessorPil`) is the reference, as on a machine
  without torchvision; Qwen's video processor needs torchvision and is left out;
- reference.safetensors and reference.json: for each of the architecture's cases (chats with
  images, spec `cases`) the processor's token ids and pixels, transformers' M-RoPE positions
  (Qwen) or token types (Gemma 3's and 4's image tokens, which see each other), the vision tower's output, the logits at every prompt position and greedy decode
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
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import AutoConfig, AutoModelForImageTextToText, PreTrainedTokenizerFast
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil
from transformers.models.gemma4.video_processing_gemma4 import Gemma4VideoProcessor
from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil
from transformers.models.pixtral.processing_pixtral import PixtralProcessor
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


# The Gemma 3 release's added tokens that its chat template and processor write, all special.
GEMMA3_SPECIAL = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]
GEMMA3_SPECIAL += ["<start_of_image>", "<end_of_image>", "<image_soft_token>"]


def gemma_tokenizer(size, special, named, more_merges=()):
    """A byte-level BPE of `size` tokens after a Gemma release's added tokens `special` (first,
    as the release numbers <pad> 0, <eos> 1 and <bos> 2): the printable ASCII bytes and the
    newline, merges to fill (the first joins two newlines, as Gemma's vocabulary has `\\n\\n`,
    so that the newlines around an image merge with the text's); the tokens `named` as the
    release's tokenizer_config.json names them."""
    printable = ["\u0120" if b == 0x20 else chr(b) for b in range(0x20, 0x7F)] + ["\u010a"]
    letters = "abcdefghijklmnopqrstuvwxyz"
    common = ["th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te"]
    common += ["is", "it", "al", "ar", "st", "to", "nt", "ng", "se", "ha", "ou", "le", "ic", "ur"]
    pairs = [("\u010a", "\u010a")] + [("\u0120", c) for c in letters] + [tuple(p) for p in common + list(more_merges)]
    pairs = pairs[: size - len(printable) - len(special)]
    vocab = {token: i for i, token in enumerate(special + printable + ["".join(p) for p in pairs])}
    core = Tokenizer(models.BPE(vocab, pairs))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(special)
    assert core.get_vocab_size() == size, core.get_vocab_size()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", extra_special_tokens=named
    )


def gemma3_tokenizer(size):
    named = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
    return gemma_tokenizer(size, GEMMA3_SPECIAL, named, ["ed"])


def gemma3_config(spec, tok):
    values = json.loads(json.dumps(spec["config"]))
    values["boi_token_index"] = tok.convert_tokens_to_ids("<start_of_image>")
    values["eoi_token_index"] = tok.convert_tokens_to_ids("<end_of_image>")
    values["image_token_index"] = tok.convert_tokens_to_ids("<image_soft_token>")
    text = values["text_config"]
    # The release ends a turn at either token.
    text["eos_token_id"] = [tok.eos_token_id, tok.convert_tokens_to_ids("<end_of_turn>")]
    text["pad_token_id"] = tok.pad_token_id
    text["bos_token_id"] = tok.bos_token_id
    return AutoConfig.for_model(values.pop("model_type"), **values)


# The Gemma 4 release's added tokens that its chat template and processor write, all special;
# its processor needs the audio markers named too, though no case sends audio.
GEMMA4_SPECIAL = ["<pad>", "<eos>", "<bos>", "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>"]
GEMMA4_SPECIAL += ["<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>"]
GEMMA4_SPECIAL += ["<|image>", "<image|>", "<|image|>", "<|video|>", "<|audio>", "<audio|>", "<|audio|>"]


def gemma4_tokenizer(size):
    """A SentencePiece-style BPE of `size` tokens, as the Gemma 4 release ships its tokenizer.json
    (spaces as "\u2581", byte fallback to `<0xNN>` tokens; llama.cpp's converter reads Gemma 4's
    vocabulary only so, through gguf-py's `LlamaHfVocab`), after the release's added tokens and
    `<unk>`: the control bytes tab to carriage return, "\u2581" and the printable ASCII
    characters, merges to fill. The image and audio tokens are named as the release's
    tokenizer_config.json names them."""
    byte_tokens = [f"<0x{b:02X}>" for b in range(0x09, 0x0E)]
    characters = ["\u2581"] + [chr(c) for c in range(0x21, 0x7F)]
    letters = "abcdefghijklmnopqrstuvwxyz"
    common = ["th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te"]
    specials = GEMMA4_SPECIAL + ["<unk>"]
    base = specials + byte_tokens + characters
    pairs = ([("\u2581", c) for c in letters] + [tuple(p) for p in common])[: size - len(base)]
    vocab = {token: i for i, token in enumerate(base + ["".join(p) for p in pairs])}
    core = Tokenizer(models.BPE(vocab, pairs, unk_token="<unk>", byte_fallback=True))
    core.normalizer = normalizers.Replace(" ", "\u2581")
    core.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    core.add_special_tokens(specials)
    assert core.get_vocab_size() == size, core.get_vocab_size()
    named = {"boi_token": "<|image>", "eoi_token": "<image|>", "image_token": "<|image|>"}
    named |= {"boa_token": "<|audio>", "eoa_token": "<audio|>", "audio_token": "<|audio|>"}
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        extra_special_tokens=named,
    )


def gemma4_config(spec, tok):
    values = json.loads(json.dumps(spec["config"]))
    values["boi_token_id"] = tok.convert_tokens_to_ids("<|image>")
    values["eoi_token_id"] = tok.convert_tokens_to_ids("<image|>")
    values["image_token_id"] = tok.convert_tokens_to_ids("<|image|>")
    values["video_token_id"] = tok.convert_tokens_to_ids("<|video|>")
    values["boa_token_id"] = tok.convert_tokens_to_ids("<|audio>")
    values["eoa_token_index"] = tok.convert_tokens_to_ids("<audio|>")
    values["audio_token_id"] = tok.convert_tokens_to_ids("<|audio|>")
    text = values["text_config"]
    # The release ends a turn at either token.
    text["eos_token_id"] = [tok.eos_token_id, tok.convert_tokens_to_ids("<turn|>")]
    text["pad_token_id"] = tok.pad_token_id
    text["bos_token_id"] = tok.bos_token_id
    return AutoConfig.for_model(values.pop("model_type"), **values)


def gemma4_grids(positions):
    """Each image's rows and columns of patches, from the processor's `image_position_ids`
    (`[images, max patches, 2]` of (x, y), -1 for padding)."""
    return torch.stack([positions[:, :, 1].amax(dim=1) + 1, positions[:, :, 0].amax(dim=1) + 1], dim=1)


def run_gemma4_case(model, processor, messages, steps):
    """Transformers' answer for one chat with Gemma 4: the processor's inputs (padded patches and
    their positions; the token types mark the image tokens, which see each other in the prompt on
    the sliding layers), the tower's pooled and embedded output, the prompt logits and `steps`
    greedy steps through the cache."""
    inputs = processor.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    with torch.no_grad():
        features = model.model.get_image_features(inputs["pixel_values"], inputs["image_position_ids"]).pooler_output
        out = model(**inputs, use_cache=True)
    prompt_logits = out.logits[0].float()
    decoded, rows = decode_steps(model, out, steps)
    tensors = {
        "input_ids": inputs["input_ids"][0].to(torch.int32),
        "mm_token_type_ids": inputs["mm_token_type_ids"][0].to(torch.int32),
        "pixel_values": inputs["pixel_values"].float(),
        "image_grid": gemma4_grids(inputs["image_position_ids"]).to(torch.int32),
        "image_features": torch.cat(features, dim=0).float(),
        "logits": prompt_logits,
        "decoded": torch.tensor(decoded, dtype=torch.int32),
        "decode_logits": torch.stack(rows),
    }
    decode_rows = torch.cat([prompt_logits[-1:], tensors["decode_logits"][:-1]])
    summary = {
        "prompt": processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
        "tokens": int(tensors["input_ids"].numel()),
        "images": tensors["image_grid"].tolist(),
        "decoded": decoded,
        "min_top_two_gap": round(top_two_gap(decode_rows), 6),
    }
    return tensors, summary


def gemma4_buffers(model, seed):
    """The tower's buffers `redraw` leaves: the clipped projections' bounds (infinite as
    transformers makes them), drawn so that some inputs and outputs are clipped, and the
    standardization's bias and scale (uninitialized as transformers makes them)."""
    generator = torch.Generator().manual_seed(seed)
    tower = model.model.vision_tower
    with torch.no_grad():
        for module in tower.modules():
            if getattr(module, "use_clipped_linears", False):
                for name in ("input", "output"):
                    bound = 1.0 + torch.rand((), generator=generator)
                    getattr(module, f"{name}_min").fill_(-bound)
                    getattr(module, f"{name}_max").fill_(bound)
        if tower.config.standardize:
            tower.std_bias.copy_(torch.randn(tower.std_bias.shape, generator=generator) * 0.5)
            tower.std_scale.copy_(0.5 + torch.rand(tower.std_scale.shape, generator=generator))


# The Mistral Small 3.1 release's control tokens, first and in its order (tekken's).
MISTRAL3_SPECIAL = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"]
MISTRAL3_SPECIAL += ["[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]"]
MISTRAL3_SPECIAL += ["[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"]
MISTRAL3_SPECIAL += ["[TOOL_CONTENT]"]


def mistral3_tokenizer(size):
    """A byte-level BPE of `size` tokens after the release's control tokens (special, numbered as
    the release numbers them): the printable ASCII bytes and merges to fill."""
    printable = ["\u0120" if b == 0x20 else chr(b) for b in range(0x20, 0x7F)]
    letters = "abcdefghijklmnopqrstuvwxyz"
    common = ["th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te"]
    common += ["is", "it", "al", "ar", "st"]
    pairs = [("\u0120", c) for c in letters] + [tuple(p) for p in common]
    pairs = pairs[: size - len(printable) - len(MISTRAL3_SPECIAL)]
    vocab = {token: i for i, token in enumerate(MISTRAL3_SPECIAL + printable + ["".join(p) for p in pairs])}
    core = Tokenizer(models.BPE(vocab, pairs))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(MISTRAL3_SPECIAL)
    assert core.get_vocab_size() == size, core.get_vocab_size()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )


def mistral3_config(spec, tok):
    values = json.loads(json.dumps(spec["config"]))
    values["image_token_index"] = tok.convert_tokens_to_ids("[IMG]")
    text = values["text_config"]
    text["bos_token_id"], text["eos_token_id"] = tok.bos_token_id, tok.eos_token_id
    text["pad_token_id"] = tok.pad_token_id
    return AutoConfig.for_model(values.pop("model_type"), **values)


def run_mistral3_case(model, processor, messages, steps):
    """Transformers' answer for one chat with Mistral 3: the processor's inputs (each image's
    rows of `[IMG]` broken by `[IMG_BREAK]`, `[IMG_END]` last), the tower's merged and projected
    output, the prompt logits and `steps` greedy steps through the cache."""
    inputs = processor.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    with torch.no_grad():
        features = model.model.get_image_features(
            inputs["pixel_values"], inputs["image_sizes"], vision_feature_layer=model.config.vision_feature_layer
        ).pooler_output
        out = model(**inputs, use_cache=True)
    prompt_logits = out.logits[0].float()
    decoded, rows = decode_steps(model, out, steps)
    tensors = {
        "input_ids": inputs["input_ids"][0].to(torch.int32),
        "pixel_values": inputs["pixel_values"].float(),
        "image_sizes": inputs["image_sizes"].to(torch.int32),
        "image_features": torch.cat(features, dim=0).float(),
        "logits": prompt_logits,
        "decoded": torch.tensor(decoded, dtype=torch.int32),
        "decode_logits": torch.stack(rows),
    }
    decode_rows = torch.cat([prompt_logits[-1:], tensors["decode_logits"][:-1]])
    summary = {
        "prompt": processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
        "tokens": int(tensors["input_ids"].numel()),
        "images": tensors["image_sizes"].tolist(),
        "decoded": decoded,
        "min_top_two_gap": round(top_two_gap(decode_rows), 6),
    }
    return tensors, summary


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


def decode_steps(model, out, steps):
    """`steps` greedy steps through the cache after the prompt's `out`: the tokens and each
    step's logits."""
    past = out.past_key_values
    decoded, rows = [], []
    token = int(out.logits[0, -1].argmax())
    with torch.no_grad():
        for _ in range(steps):
            decoded.append(token)
            out = model(input_ids=torch.tensor([[token]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            rows.append(out.logits[0, -1].float())
            token = int(rows[-1].argmax())
    return decoded, rows


def run_gemma3_case(model, processor, messages, steps):
    """Transformers' answer for one chat with Gemma 3: the processor's inputs (its token types
    mark the image tokens, which see each other in the prompt), the tower's pooled and projected
    output, the prompt logits and `steps` greedy steps through the cache."""
    inputs = processor.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    with torch.no_grad():
        features = model.model.get_image_features(inputs["pixel_values"]).pooler_output
        out = model(**inputs, use_cache=True)
    prompt_logits = out.logits[0].float()
    decoded, rows = decode_steps(model, out, steps)
    tensors = {
        "input_ids": inputs["input_ids"][0].to(torch.int32),
        "token_type_ids": inputs["token_type_ids"][0].to(torch.int32),
        "pixel_values": inputs["pixel_values"].float(),
        "image_features": features.flatten(0, 1).float(),
        "logits": prompt_logits,
        "decoded": torch.tensor(decoded, dtype=torch.int32),
        "decode_logits": torch.stack(rows),
    }
    decode_rows = torch.cat([prompt_logits[-1:], tensors["decode_logits"][:-1]])
    summary = {
        "prompt": processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
        "tokens": int(tensors["input_ids"].numel()),
        "images": int(inputs["pixel_values"].shape[0]),
        "decoded": decoded,
        "min_top_two_gap": round(top_two_gap(decode_rows), 6),
    }
    return tensors, summary


def run_qwen_case(model, processor, messages, steps):
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
    decoded, rows = decode_steps(model, out, steps)
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


def make_qwen_processor(spec, arch, tok, template):
    image_processor = Qwen2VLImageProcessorPil(**spec["image_processor"])
    return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tok, chat_template=template)


def make_gemma3_processor(spec, arch, tok, template):
    image_processor = Gemma3ImageProcessorPil(**arch["image_processor"])
    return transformers.Gemma3Processor(
        image_processor=image_processor,
        tokenizer=tok,
        chat_template=template,
        image_seq_length=arch["image_seq_length"],
    )


def make_gemma4_processor(spec, arch, tok, template):
    """transformers' Gemma4Processor; its tokenizer's added tokens listed special, as the
    release's are (llama.cpp's converter marks only the tokenizer's special tokens as control
    tokens, which its chat needs): the processor replaces that list with `<|video|>` alone (its
    FIXME), so the rest is added back after it."""
    image_processor = Gemma4ImageProcessorPil(**arch["image_processor"])
    processor = transformers.Gemma4Processor(
        feature_extractor=Gemma4AudioFeatureExtractor(),
        image_processor=image_processor,
        tokenizer=tok,
        video_processor=Gemma4VideoProcessor(),
        chat_template=template,
        image_seq_length=arch["image_processor"]["max_soft_tokens"],
    )
    unnamed = [token for token in GEMMA4_SPECIAL if token not in tok.all_special_tokens]
    tok.add_special_tokens({"additional_special_tokens": unnamed}, replace_extra_special_tokens=False)
    return processor


def make_mistral3_processor(spec, arch, tok, template):
    image_processor = PixtralImageProcessorPil(**arch["image_processor"])
    return PixtralProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        chat_template=template,
        patch_size=arch["config"]["vision_config"]["patch_size"],
        spatial_merge_size=arch["config"]["spatial_merge_size"],
    )


# Each family's tokenizer, config, processor and reference run.
FAMILIES = {
    "qwen": (tokenizer, build_config, make_qwen_processor, run_qwen_case),
    "gemma3": (gemma3_tokenizer, gemma3_config, make_gemma3_processor, run_gemma3_case),
    "gemma4": (gemma4_tokenizer, gemma4_config, make_gemma4_processor, run_gemma4_case),
    "mistral3": (mistral3_tokenizer, mistral3_config, make_mistral3_processor, run_mistral3_case),
}


def save_processor(processor, directory, nested):
    """The processor's files as a release has them: transformers 5's `save_pretrained` writes
    the tokenizer and chat_template.jinja, and the image processor's settings nested in a
    processor_config.json, as the releases made with transformers 5 have them (`nested`); the
    older releases (saved by transformers 4) have them flat in preprocessor_config.json, as the
    image processor's own `save_pretrained` writes it."""
    processor.save_pretrained(directory)
    if nested:
        return
    nested = directory / "processor_config.json"
    # The releases' processor_config.json, where they have one, holds the processor's own keys.
    own = {key: value for key, value in json.loads(nested.read_text()).items() if key != "image_processor"}
    if set(own) - {"processor_class"}:
        nested.write_text(json.dumps(own, indent=2, sort_keys=True) + "\n")
    else:
        nested.unlink()
    processor.image_processor.save_pretrained(directory)
    path = directory / "preprocessor_config.json"
    settings = json.loads(path.read_text())
    settings["processor_class"] = type(processor).__name__
    path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def make_architecture(name, arch, spec, root, images, out):
    hf_dir = out / name / "hf"
    shutil.rmtree(hf_dir.parent, ignore_errors=True)
    hf_dir.mkdir(parents=True)
    make_tokenizer, make_config, make_processor, run_case = FAMILIES[arch.get("family", "qwen")]
    tok = make_tokenizer(arch["config"]["text_config"]["vocab_size"])
    template = (root / arch.get("chat_template", spec["chat_template"])).read_text()
    processor = make_processor(spec, arch, tok, template)
    config = make_config(arch, tok)
    torch.manual_seed(arch["seed"])
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32, attn_implementation="eager")
    redraw(model, arch["seed"])
    if arch.get("family") == "gemma4":
        gemma4_buffers(model, arch["seed"])
    model.eval()
    # The layout of the release: Qwen3.5's were made with transformers 5, Gemma 3's with 4.
    model.save_pretrained(hf_dir, save_original_format=arch.get("save_original_format", False))
    save_processor(processor, hf_dir, arch.get("nested_processor_config", False))

    tensors = {}
    record = {"mirrors": arch["mirrors"], "model_type": config.model_type, "cases": {}, "images": {}}
    for case in arch["cases"]:
        messages = spec["cases"][case]
        if "system" in arch:
            messages = [{"role": "system", "content": arch["system"]}, *messages]
        case_tensors, summary = run_case(model, processor, with_paths(messages, images), spec["decode_steps"])
        tensors.update({f"{case}.{key}": value for key, value in case_tensors.items()})
        record["cases"][case] = {"messages": messages, **summary}
    for file in spec["images"]:
        # Pixtral's processor resizes to whole merged patches, as it does in a chat.
        kwargs = {}
        if isinstance(processor, PixtralProcessor):
            merged = processor.spatial_merge_size * processor.patch_size
            kwargs["patch_size"] = {"height": merged, "width": merged}
        alone = processor.image_processor(images=[str(images / file)], return_tensors="pt", **kwargs)
        stem = Path(file).stem
        tensors[f"image.{stem}.pixel_values"] = alone["pixel_values"].float()
        if "image_position_ids" in alone:
            grid = gemma4_grids(alone["image_position_ids"]).to(torch.int32)
            tensors[f"image.{stem}.image_grid"] = grid
            record["images"][file] = {"image_grid": grid.tolist()}
        elif "image_grid_thw" in alone:
            tensors[f"image.{stem}.image_grid_thw"] = alone["image_grid_thw"].to(torch.int32)
            record["images"][file] = {"image_grid_thw": alone["image_grid_thw"].tolist()}
        else:
            record["images"][file] = {"pixel_values": list(alone["pixel_values"].shape)}
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
            print(f"{name} {case}: {summary['tokens']} tokens, images {summary.get('images', summary.get('image_grid_thw'))}, "
                  f"decoded {summary['decoded']}, gap {summary['min_top_two_gap']}", flush=True)


if __name__ == "__main__":
    main()
