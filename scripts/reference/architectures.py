"""Tiny random-weight checkpoints of each architecture, with mlx-lm's logits over them.

Usage: architectures.py CONFIG.json OUT_DIR [ARCH ...]

For each architecture in CONFIG.json (all of them, or the ones named), mlx-lm's own Model class
is built from the tiny config with seeded random weights, and OUT_DIR/<arch>/<variant>/ gets:

- f32: config.json and model.safetensors (+ index) as mlx_lm.utils.save_model/save_config write
  them (the mlx-community layout), float32 weights.
- q4: that model quantized as `mlx_lm.convert -q` does (affine, group 64, 4 bits, the model's
  quant_predicate), so config.json's quantization entry is the one mlx-community ships.
- hf: the same float32 weights under the Hugging Face names and layout (the inverse of the
  model's sanitize) with the Hugging Face config.json; checked by loading it with mlx-lm's
  load_model and comparing its logits with f32's. It has no reference of its own: f32's holds.
- mxfp4, hf-mxfp4 (gpt_oss): the experts in MXFP4 as openai/gpt-oss ships them (hf-mxfp4, with
  its _blocks/_scales tensors) and as mlx_lm.convert without -q writes that checkpoint (mxfp4);
  the other weights stay float32. hf-mxfp4 shares mxfp4's reference.

Every directory with its own weights gets reference.safetensors: `prompt` int32[P], `decoded`
int32[D], `logits` float32[P+D, vocab]. Rows 0..P-1 come from one forward pass over the prompt
with a fresh make_prompt_cache(model); then D greedy steps through that cache, one token each:
decoded[0] = argmax(row P-1), row P+i = the logits after feeding decoded[i], decoded[i+1] =
argmax(row P+i). All in float32. OUT_DIR/index.json lists the variants and their references.
"""

import copy
import json
import math
import shutil
import sys
from importlib.metadata import version
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.models.switch_layers import QuantizedSwitchLinear
from mlx_lm.utils import _get_classes, load_model, quantize_model, save_config, save_model


def _without_global_scale():
    """mlx-lm 0.32.2's QuantizedSwitchLinear passes global_scale= (nvfp4's per-expert scale,
    None otherwise) to mx.gather_qmm, which MLX 0.32.2, the one corral links, does not take.
    Without a global scale the call is the same without the argument."""
    if "global_scale" in mx.gather_qmm.__doc__.split("\n")[0]:
        return

    def call(self, x, indices, sorted_indices=False):
        if self.global_scale is not None:
            raise NotImplementedError("this MLX's gather_qmm takes no global_scale")
        x = mx.gather_qmm(
            x,
            self["weight"],
            self["scales"],
            self.get("biases"),
            rhs_indices=indices,
            transpose=True,
            group_size=self.group_size,
            bits=self.bits,
            mode=self.mode,
            sorted_indices=sorted_indices,
        )
        if "bias" in self:
            x = x + mx.expand_dims(self["bias"][indices], -2)
        return x

    QuantizedSwitchLinear.__call__ = call


_without_global_scale()

# The scale of the noise given to parameters mlx-lm initializes to a constant (norm weights,
# biases of the switch layers, sinks, router scales, correction biases, layer scalars), so that
# every parameter matters to the logits.
CONSTANT_NOISE = 0.5


def prompt_ids(length, vocab_size):
    # Spread over the vocabulary, deterministic, no RNG (the formula of reference_logits.py).
    return [(7 + 131 * i + (i * i) % 17) % vocab_size for i in range(length)]


def vocab_size(config):
    return config.get("text_config", config)["vocab_size"]


# ----------------------------------------------------------------------------------------------
# Building and running the models


def build_model(spec):
    """mlx-lm's Model for the config, every parameter random (seeded), and its weights."""
    config = copy.deepcopy(spec["config"])
    mx.random.seed(spec["seed"])
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(copy.deepcopy(config)))
    weights = {}
    for name, value in tree_flatten(model.parameters()):
        if value.size > 1 and mx.all(value == value.reshape(-1)[0]).item():
            if value.ndim >= 2:
                bound = 1 / math.sqrt(value.shape[-1])
                value = mx.random.uniform(-bound, bound, value.shape)
            else:
                value = value + CONSTANT_NOISE * mx.random.normal(value.shape)
        elif value.size == 1:
            value = value + CONSTANT_NOISE * mx.random.normal(value.shape)
        weights[name] = value.astype(mx.float32)
    if spec.get("tied_by_absence"):
        weights.pop("lm_head.weight")
        weights = model.sanitize(weights)
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    return model, config


def reference(model, config, prompt_length, decode_steps):
    prompt = prompt_ids(prompt_length, vocab_size(config))
    cache = make_prompt_cache(model)
    logits = model(mx.array(prompt, mx.int32)[None], cache=cache)[0].astype(mx.float32)
    rows = [logits]
    token = mx.argmax(logits[-1]).item()
    decoded = []
    for _ in range(decode_steps):
        decoded.append(token)
        step = model(mx.array([[token]], mx.int32), cache=cache)[0].astype(mx.float32)
        rows.append(step)
        token = mx.argmax(step[-1]).item()
    logits = mx.concatenate(rows, axis=0)
    mx.eval(logits)
    return {
        "prompt": mx.array(prompt, mx.int32),
        "decoded": mx.array(decoded, mx.int32),
        "logits": logits,
    }


def top_two_gap(ref):
    """The smallest top-two gap over the rows greedy decoding picks from (P-1 .. P+D-2)."""
    steps = ref["decoded"].size
    logits = ref["logits"][-steps - 1 : -1]
    top = mx.topk(logits, 2, axis=-1)
    return (mx.max(top, axis=-1) - mx.min(top, axis=-1)).min().item()


def write_reference(directory, ref):
    metadata = {"mlx": version("mlx"), "mlx_lm": version("mlx-lm")}
    mx.save_safetensors(str(directory / "reference.safetensors"), ref, metadata=metadata)


def same_reference(name, ref, expected):
    if not mx.array_equal(ref["decoded"], expected["decoded"]).item():
        raise SystemExit(f"{name}: decoded {ref['decoded'].tolist()} != {expected['decoded'].tolist()}")
    diff = mx.abs(ref["logits"] - expected["logits"]).max().item()
    if diff > 1e-5:
        raise SystemExit(f"{name}: logits differ by {diff}")
    return diff


def save_mlx(directory, model, config):
    save_model(directory, model)
    save_config(copy.deepcopy(config), directory / "config.json")


def save_hf(directory, weights, config):
    directory.mkdir(parents=True, exist_ok=True)
    weights = dict(sorted(weights.items()))
    mx.save_safetensors(str(directory / "model.safetensors"), weights, metadata={"format": "pt"})
    with open(directory / "config.json", "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


# ----------------------------------------------------------------------------------------------
# The Hugging Face layouts: each the inverse of the model's sanitize.


def random_tensor(shape):
    return mx.random.uniform(-0.1, 0.1, shape).astype(mx.float32)


def unstack_experts(weights, stacked, per_expert):
    """`prefix.{stacked}.{proj}.weight` [E, out, in] -> `prefix.{per_expert(e, proj)}.weight`."""
    out = {}
    for key, value in weights.items():
        head, sep, tail = key.partition(f".{stacked}.")
        if not sep:
            out[key] = value
            continue
        proj, _, kind = tail.partition(".")
        for e in range(value.shape[0]):
            out[f"{head}.{per_expert(e, proj)}.{kind}"] = value[e]
    return out


def hf_qwen3_moe(config, weights):
    weights = unstack_experts(weights, "mlp.switch_mlp", lambda e, p: f"mlp.experts.{e}.{p}")
    return config, weights


def hf_mixtral(config, weights):
    names = {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}
    weights = unstack_experts(
        weights, "block_sparse_moe.switch_mlp", lambda e, p: f"block_sparse_moe.experts.{e}.{names[p]}"
    )
    return config, weights


def hf_glm4_moe(config, weights):
    weights = unstack_experts(weights, "mlp.switch_mlp", lambda e, p: f"mlp.experts.{e}.{p}")
    # The multi-token-prediction layer(s) after the last decoder layer, which sanitize drops. A
    # few of its tensors (a real one is a whole decoder layer plus these) stand for all of it.
    hidden = config["hidden_size"]
    for n in range(config.get("num_nextn_predict_layers", 0)):
        prefix = f"model.layers.{config['num_hidden_layers'] + n}"
        weights[f"{prefix}.eh_proj.weight"] = random_tensor((hidden, 2 * hidden))
        weights[f"{prefix}.enorm.weight"] = random_tensor((hidden,))
        weights[f"{prefix}.hnorm.weight"] = random_tensor((hidden,))
        weights[f"{prefix}.shared_head.norm.weight"] = random_tensor((hidden,))
        weights[f"{prefix}.input_layernorm.weight"] = random_tensor((hidden,))
    return config, weights


def hf_deepseek_v3(config, weights):
    weights = unstack_experts(weights, "mlp.switch_mlp", lambda e, p: f"mlp.experts.{e}.{p}")
    # One kv_b_proj per layer: each head's key rows (embed_q transposed), then its value rows.
    rank = config["kv_lora_rank"]
    for key in [k for k in weights if k.endswith(".self_attn.embed_q.weight")]:
        prefix = key.removesuffix(".embed_q.weight")
        wk = weights.pop(key).swapaxes(-1, -2)
        wv = weights.pop(f"{prefix}.unembed_out.weight")
        weights[f"{prefix}.kv_b_proj.weight"] = mx.concatenate([wk, wv], axis=1).reshape(-1, rank)
    return config, weights


def interleave(a, b, axis):
    """Rows of a at even, of b at odd indices along axis (gpt-oss's fused gate_up order)."""
    stacked = mx.stack([a, b], axis=axis + 1)
    shape = list(a.shape)
    shape[axis] *= 2
    return stacked.reshape(shape)


def hf_gpt_oss(config, weights):
    """The layout gpt_oss's sanitize takes for unquantized experts: gate_up_proj.weight
    [E, 2I, H] with gate rows at even and up rows at odd indices, gate_up_proj_bias [E, 2I] the
    same, down_proj.weight [E, H, I], down_proj_bias [E, H]."""
    out = {}
    for key, value in weights.items():
        if ".mlp.experts.up_proj." in key:
            continue
        if ".mlp.experts.gate_proj." in key:
            up = weights[key.replace("gate_proj", "up_proj")]
            base = key.split(".gate_proj.")[0]
            if key.endswith(".weight"):
                out[f"{base}.gate_up_proj.weight"] = interleave(value, up, axis=1)
            else:
                out[f"{base}.gate_up_proj_bias"] = interleave(value, up, axis=1)
        elif key.endswith(".mlp.experts.down_proj.bias"):
            out[key.replace("down_proj.bias", "down_proj_bias")] = value
        else:
            out[key] = value
    return config, out


def mxfp4_blocks(w):
    """[..., out, in] float -> openai's MXFP4 `_blocks` uint8 [..., out, in/32, 16] and `_scales`
    uint8 [..., out, in/32]: MLX's mxfp4 packing read as bytes (what sanitize undoes)."""
    packed, scales = mx.quantize(w, group_size=32, bits=4, mode="mxfp4")
    blocks = packed.view(mx.uint8).reshape(*packed.shape[:-1], -1, 16)
    return blocks, scales


def hf_gpt_oss_mxfp4(config, weights):
    """openai/gpt-oss's own checkpoint: experts as MXFP4 _blocks/_scales (gate and up rows
    interleaved), their biases and every other weight unquantized."""
    config = copy.deepcopy(config)
    config["quantization_config"] = {
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    }
    out = {}
    for key, value in weights.items():
        if ".mlp.experts.up_proj." in key:
            continue
        if ".mlp.experts.gate_proj." in key:
            up = weights[key.replace("gate_proj", "up_proj")]
            base = key.split(".gate_proj.")[0]
            if key.endswith(".weight"):
                gate_blocks, gate_scales = mxfp4_blocks(value)
                up_blocks, up_scales = mxfp4_blocks(up)
                out[f"{base}.gate_up_proj_blocks"] = interleave(gate_blocks, up_blocks, axis=1)
                out[f"{base}.gate_up_proj_scales"] = interleave(gate_scales, up_scales, axis=1)
            else:
                out[f"{base}.gate_up_proj_bias"] = interleave(value, up, axis=1)
        elif key.endswith(".mlp.experts.down_proj.weight"):
            blocks, scales = mxfp4_blocks(value)
            base = key.removesuffix(".weight")
            out[f"{base}_blocks"] = blocks
            out[f"{base}_scales"] = scales
        elif key.endswith(".mlp.experts.down_proj.bias"):
            out[key.replace("down_proj.bias", "down_proj_bias")] = value
        else:
            out[key] = value
    return config, out


def hf_gemma3_text(config, weights):
    """google/gemma-3-4b-it and up: Gemma3ForConditionalGeneration, the text model under
    language_model.model., the head tied (no lm_head), a vision tower sanitize drops."""
    text = {k: v for k, v in config.items() if k not in ("architectures", "torch_dtype")}
    hf_config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "boi_token_index": 255999,
        "eoi_token_index": 256000,
        "image_token_index": 262144,
        "mm_tokens_per_image": 256,
        "text_config": text,
        "vision_config": tiny_siglip("siglip_vision_model"),
        # Not in Google's config.json: mlx-lm's gemma3 replaces text_config's vocab_size with
        # this one, whose default is 262208.
        "vocab_size": config["vocab_size"],
        "torch_dtype": config["torch_dtype"],
    }
    out = {"language_model." + k: v for k, v in weights.items()}
    out["vision_tower.vision_model.post_layernorm.weight"] = random_tensor((16,))
    out["multi_modal_projector.mm_input_projection_weight"] = random_tensor((16, 64))
    return hf_config, out


def tiny_siglip(model_type):
    return {
        "model_type": model_type,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "image_size": 32,
        "patch_size": 16,
    }


def hf_gemma4_text(config, weights):
    """google/gemma-4-*: Gemma4ForConditionalGeneration, the text model under
    model.language_model., experts fused (gate_up_proj [E, 2I, H] gate first, down_proj
    [E, H, I], no .weight), the KV-shared layers still carrying k_proj/v_proj/k_norm (unused),
    the head tied, vision and audio towers sanitize drops."""
    text = {k: v for k, v in config.items() if k not in ("architectures", "torch_dtype")}
    hf_config = {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "model_type": "gemma4",
        "text_config": text,
        "vision_config": tiny_siglip("gemma4_vision"),
        "audio_config": {"model_type": "gemma4_audio", "hidden_size": 16},
        "boi_token_id": 255999,
        "eoi_token_id": 258882,
        "image_token_id": 258880,
        "audio_token_id": 258881,
        # Not in Google's config.json: mlx-lm's gemma4 replaces text_config's vocab_size with
        # this one, whose default is 262144.
        "vocab_size": config["vocab_size"],
        "tie_word_embeddings": True,
        "torch_dtype": config["torch_dtype"],
    }
    out = {}
    for key, value in weights.items():
        name = "model.language_model." + key.removeprefix("model.")
        if ".experts.switch_glu.up_proj." in key:
            continue
        if ".experts.switch_glu.gate_proj.weight" in key:
            up = weights[key.replace("gate_proj", "up_proj")]
            base = name.split(".switch_glu.")[0]
            out[f"{base}.gate_up_proj"] = mx.concatenate([value, up], axis=-2)
        elif ".experts.switch_glu.down_proj.weight" in key:
            out[name.split(".switch_glu.")[0] + ".down_proj"] = value
        else:
            out[name] = value
    first_shared = config["num_hidden_layers"] - config["num_kv_shared_layers"]
    hidden = config["hidden_size"]
    for layer in range(first_shared, config["num_hidden_layers"]):
        full = config["layer_types"][layer] == "full_attention"
        head_dim = config["global_head_dim"] if full else config["head_dim"]
        k_eq_v = config.get("attention_k_eq_v", False) and full
        kv_heads = config["num_key_value_heads"]
        if k_eq_v and config.get("num_global_key_value_heads") is not None:
            kv_heads = config["num_global_key_value_heads"]
        prefix = f"model.language_model.layers.{layer}.self_attn"
        out[f"{prefix}.k_proj.weight"] = random_tensor((kv_heads * head_dim, hidden))
        if not k_eq_v:
            out[f"{prefix}.v_proj.weight"] = random_tensor((kv_heads * head_dim, hidden))
        out[f"{prefix}.k_norm.weight"] = random_tensor((head_dim,))
    out["model.vision_tower.encoder.layers.0.mlp.fc1.weight"] = random_tensor((32, 16))
    out["model.embed_vision.embedding_projection.weight"] = random_tensor((hidden, 16))
    out["model.audio_tower.output_proj.weight"] = random_tensor((16, 16))
    out["model.embed_audio.embedding_projection.weight"] = random_tensor((hidden, 16))
    return hf_config, out


def with_vision_config(config):
    hf_config = copy.deepcopy(config)
    hf_config["vision_config"] = {
        "model_type": "pixtral",
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "head_dim": 8,
        "image_size": 32,
        "patch_size": 16,
    }
    return hf_config


def hf_mistral3(config, weights):
    """Mistral-Small-3.1-24B-Instruct-2503 (transformers 4.50): language_model.model.*,
    language_model.lm_head.weight, vision_tower.*, multi_modal_projector.*."""
    out = dict(weights)
    out["vision_tower.transformer.layers.0.attention.q_proj.weight"] = random_tensor((16, 16))
    out["multi_modal_projector.linear_1.weight"] = random_tensor((64, 16))
    return with_vision_config(config), out


def hf_ministral3(config, weights):
    """Ministral-3-*-2512 (transformers 5): model.language_model.*, lm_head.weight,
    model.vision_tower.*, model.multi_modal_projector.*."""
    out = {}
    for key, value in weights.items():
        if key.startswith("language_model.model."):
            out["model.language_model." + key.removeprefix("language_model.model.")] = value
        else:
            out[key.removeprefix("language_model.")] = value
    out["model.vision_tower.transformer.layers.0.attention.q_proj.weight"] = random_tensor((16, 16))
    out["model.multi_modal_projector.linear_1.weight"] = random_tensor((64, 16))
    return with_vision_config(config), out


def hf_llama4(config, weights):
    """Llama-4-Scout/Maverick: language_model.model.*, language_model.lm_head.weight, experts
    fused as gate_up_proj [E, H, 2I] (gate first on the last axis) and down_proj [E, I, H]
    (transposed, no .weight), vision_model.*, multi_modal_projector.*."""
    out = {}
    for key, value in weights.items():
        if ".feed_forward.experts.up_proj." in key:
            continue
        if ".feed_forward.experts.gate_proj.weight" in key:
            up = weights[key.replace("gate_proj", "up_proj")]
            base = key.split(".gate_proj.")[0]
            out[f"{base}.gate_up_proj"] = mx.concatenate(
                [value.swapaxes(1, 2), up.swapaxes(1, 2)], axis=-1
            )
        elif ".feed_forward.experts.down_proj.weight" in key:
            out[key.removesuffix(".weight")] = value.swapaxes(1, 2)
        else:
            out[key] = value
    out["vision_model.model.layers.0.mlp.fc1.weight"] = random_tensor((32, 16))
    out["multi_modal_projector.linear_1.weight"] = random_tensor((64, 16))
    hf_config = copy.deepcopy(config)
    hf_config["vision_config"] = {
        "model_type": "llama4_vision_model",
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "image_size": 32,
        "patch_size": 16,
        "vision_output_dim": 16,
    }
    return hf_config, out


# The norms Qwen3-Next and Qwen3.5 checkpoints store as the offset from one (sanitize adds one).
QWEN_OFFSET_NORMS = (
    ".input_layernorm.weight",
    ".post_attention_layernorm.weight",
    "model.norm.weight",
    ".q_norm.weight",
    ".k_norm.weight",
)


def hf_gated_delta(key, value):
    """A Qwen3-Next / Qwen3.5 tensor as transformers stores it: the depthwise conv1d weight
    [C, 1, K] (MLX's is [C, K, 1]), the decoder norms as their offset from one."""
    if "conv1d.weight" in key:
        return value.moveaxis(1, 2)
    if any(key.endswith(suffix) for suffix in QWEN_OFFSET_NORMS):
        return value - 1.0
    return value


def hf_qwen3_next(config, weights):
    """Qwen/Qwen3-Next-80B-A3B-*: experts one by one, conv1d and norms as hf_gated_delta says,
    and the multi-token-prediction layer (mtp.*) that sanitize drops."""
    weights = unstack_experts(weights, "mlp.switch_mlp", lambda e, p: f"mlp.experts.{e}.{p}")
    out = {key: hf_gated_delta(key, value) for key, value in weights.items()}
    out["mtp.fc.weight"] = random_tensor((config["hidden_size"], 2 * config["hidden_size"]))
    return config, out


def hf_qwen3_5(config, weights):
    """Qwen/Qwen3.5-* and Qwen3.6-*: the text model under model.language_model., lm_head at the
    top, experts fused (gate_up_proj [E, 2I, H] gate first, down_proj [E, H, I], no .weight),
    conv1d and norms as hf_gated_delta says, a vision tower (model.visual) and mtp.* that
    sanitize drops."""
    out = {}
    for key, value in weights.items():
        if key.startswith("language_model.model."):
            name = "model.language_model." + key.removeprefix("language_model.model.")
        else:
            name = key.removeprefix("language_model.")
        if ".switch_mlp.up_proj." in key:
            continue
        if ".switch_mlp.gate_proj.weight" in key:
            up = weights[key.replace("gate_proj", "up_proj")]
            base = name.split(".switch_mlp.")[0]
            out[f"{base}.experts.gate_up_proj"] = mx.concatenate([value, up], axis=-2)
        elif ".switch_mlp.down_proj.weight" in key:
            out[name.split(".switch_mlp.")[0] + ".experts.down_proj"] = value
        else:
            out[name] = hf_gated_delta(name, value)
    hidden = config["text_config"]["hidden_size"]
    out["model.visual.blocks.0.attn.qkv.weight"] = random_tensor((48, 16))
    out["mtp.fc.weight"] = random_tensor((hidden, 2 * hidden))
    hf_config = copy.deepcopy(config)
    hf_config["vision_config"] = {"model_type": hf_config["model_type"], "hidden_size": 16, "depth": 1}
    return hf_config, out


def hf_lfm2(config, weights):
    """LiquidAI/LFM2-*: the short convolution's depthwise weight as torch stores it, [C, 1, K]
    (MLX's is [C, K, 1]); every other name as mlx-lm's."""
    out = {k: v.moveaxis(1, 2) if k.endswith(".conv.conv.weight") else v for k, v in weights.items()}
    return config, out


def hf_lfm2_moe(config, weights):
    """LiquidAI/LFM2-8B-A1B: as hf_lfm2, the projections named w1 (gate), w3 (up), w2 (down)
    and one tensor per expert."""
    names = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}
    weights = unstack_experts(
        weights, "feed_forward.switch_mlp", lambda e, p: f"feed_forward.experts.{e}.{names[p]}"
    )
    out = {}
    for key, value in hf_lfm2(config, weights)[1].items():
        for mlx_name, hf_name in names.items():
            key = key.replace(f".feed_forward.{mlx_name}.", f".feed_forward.{hf_name}.")
        out[key] = value
    return config, out


HF_LAYOUTS = {
    "qwen3_moe": hf_qwen3_moe,
    "mixtral": hf_mixtral,
    "glm4_moe": hf_glm4_moe,
    "deepseek_v3": hf_deepseek_v3,
    "gpt_oss": hf_gpt_oss,
    "gemma3_text": hf_gemma3_text,
    "gemma4_text": hf_gemma4_text,
    "gemma4_text_moe": hf_gemma4_text,
    "mistral3": hf_mistral3,
    "ministral3": hf_ministral3,
    "llama4": hf_llama4,
    "qwen3_next": hf_qwen3_next,
    "qwen3_5": hf_qwen3_5,
    "qwen3_5_moe": hf_qwen3_5,
    "lfm2": hf_lfm2,
    "lfm2_moe": hf_lfm2_moe,
}


# ----------------------------------------------------------------------------------------------


def quantization_summary(directory):
    """Which weights are quantized how, from the saved files (for index.json)."""
    weights = mx.load(str(directory / "model.safetensors"))
    quantized, plain = [], []
    for key in sorted(weights):
        if key.endswith(".scales"):
            quantized.append(key.removesuffix(".scales"))
    for key in sorted(weights):
        base = key.rsplit(".", 1)[0]
        if key.endswith(".weight") and base not in quantized and weights[key].ndim >= 2:
            plain.append(base)
    return quantized, plain


def generate(name, spec, out_root, prompt_length, decode_steps, index):
    variants = spec["variants"]
    arch_dir = out_root / name
    shutil.rmtree(arch_dir, ignore_errors=True)
    entry = index[name] = {}

    def record(variant, directory, reference_variant, ref=None, **extra):
        config = json.loads((directory / "config.json").read_text())
        item = {"model_type": config["model_type"], "reference": reference_variant}
        if "text_config" in config:
            item["text_model_type"] = config["text_config"].get("model_type")
        if "quantization" in config:
            item["quantization"] = config["quantization"]
        if ref is not None:
            item["decoded"] = ref["decoded"].tolist()
            item["min_top_two_gap"] = round(top_two_gap(ref), 6)
        item.update(extra)
        entry[variant] = item

    model, config = build_model(spec)
    f32_dir = arch_dir / "f32"
    save_mlx(f32_dir, model, config)
    del model
    model, loaded_config = load_model(f32_dir)
    f32_ref = reference(model, loaded_config, prompt_length, decode_steps)
    write_reference(f32_dir, f32_ref)
    record("f32", f32_dir, "f32", f32_ref)
    print(f"{name}/f32: decoded {f32_ref['decoded'].tolist()}, gap {top_two_gap(f32_ref):.4f}")

    if "q4" in variants:
        model, loaded_config = load_model(f32_dir)
        model, q_config = quantize_model(model, loaded_config, None, None)
        q4_dir = arch_dir / "q4"
        save_mlx(q4_dir, model, q_config)
        del model
        model, loaded_config = load_model(q4_dir)
        q4_ref = reference(model, loaded_config, prompt_length, decode_steps)
        write_reference(q4_dir, q4_ref)
        quantized, plain = quantization_summary(q4_dir)
        record("q4", q4_dir, "q4", q4_ref, unquantized=plain)
        print(f"{name}/q4: decoded {q4_ref['decoded'].tolist()}, unquantized {plain}")

    f32_weights = mx.load(str(f32_dir / "model.safetensors"))
    f32_config = json.loads((f32_dir / "config.json").read_text())

    if "hf" in variants:
        mx.random.seed(spec["seed"] + 1000)
        hf_config, hf_weights = HF_LAYOUTS[name](copy.deepcopy(f32_config), dict(f32_weights))
        hf_dir = arch_dir / "hf"
        save_hf(hf_dir, hf_weights, hf_config)
        model, loaded_config = load_model(hf_dir)
        diff = same_reference(f"{name}/hf", reference(model, loaded_config, prompt_length, decode_steps), f32_ref)
        record("hf", hf_dir, "f32", max_abs_diff_to_reference=diff)
        print(f"{name}/hf: loads through sanitize, max |logits - f32| = {diff}")

    if "hf-mxfp4" in variants:
        hf_config, hf_weights = hf_gpt_oss_mxfp4(copy.deepcopy(f32_config), dict(f32_weights))
        hf_dir = arch_dir / "hf-mxfp4"
        save_hf(hf_dir, hf_weights, hf_config)
        # What `mlx_lm.convert --hf-path openai/gpt-oss-...` (no -q) writes from it.
        model, loaded_config = load_model(hf_dir)
        mxfp4_dir = arch_dir / "mxfp4"
        save_mlx(mxfp4_dir, model, loaded_config)
        del model
        model, loaded_config = load_model(mxfp4_dir)
        mxfp4_ref = reference(model, loaded_config, prompt_length, decode_steps)
        write_reference(mxfp4_dir, mxfp4_ref)
        quantized, plain = quantization_summary(mxfp4_dir)
        record("mxfp4", mxfp4_dir, "mxfp4", mxfp4_ref, quantized=quantized)
        model, loaded_config = load_model(hf_dir)
        diff = same_reference(
            f"{name}/hf-mxfp4", reference(model, loaded_config, prompt_length, decode_steps), mxfp4_ref
        )
        record("hf-mxfp4", hf_dir, "mxfp4", max_abs_diff_to_reference=diff)
        print(f"{name}/mxfp4: decoded {mxfp4_ref['decoded'].tolist()}; hf-mxfp4 max diff {diff}")


def main():
    config_path, out_root, *only = sys.argv[1:]
    document = json.loads(Path(config_path).read_text())
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    index_path = out_root / "index.json"
    architectures = document["architectures"]
    unknown = [name for name in only if name not in architectures]
    if unknown:
        raise SystemExit(f"unknown architectures: {unknown}")
    index = {"architectures": {}}
    if only and index_path.exists():
        index = json.loads(index_path.read_text())
    else:
        for stale in out_root.iterdir():
            if stale.is_dir() and stale.name not in architectures:
                shutil.rmtree(stale)
    for name, spec in architectures.items():
        if only and name not in only:
            continue
        generate(
            name,
            spec,
            out_root,
            document["prompt_length"],
            document["decode_steps"],
            index["architectures"],
        )
    index["mlx"] = version("mlx")
    index["mlx_lm"] = version("mlx-lm")
    index["prompt_length"] = document["prompt_length"]
    index["decode_steps"] = document["decode_steps"]
    index["architectures"] = dict(sorted(index["architectures"].items()))
    index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
