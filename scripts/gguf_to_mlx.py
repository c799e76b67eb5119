"""A single-file GGUF model as an MLX (mlx-lm) model directory holding the same quantized bytes.

Usage: gguf_to_mlx.py [--uniform-bits N] MODEL.gguf OUT_DIR

Run it with the Python of a venv that has mlx, mlx-lm, tokenizers and gguf (scripts/bench_gguf.sh
makes one under build/bench/venv). It exists so that corral's GGUF path can be compared with the
same model as an MLX directory (scripts/bench_gguf.sh): no download, and no requantization.

What it writes into OUT_DIR (created; existing files of these names are replaced):
  model.safetensors   MLX's own reading of the GGUF (`mx.load`): Q4_0, Q4_1 and Q8_0 tensors in
                      MLX's affine layout (uint32-packed `weight`, float16 `scales` and `biases`,
                      groups of 32 along the input), float tensors as they are. Renamed from
                      llama.cpp's names to Hugging Face's (`blk.N.attn_q` ->
                      `model.layers.N.self_attn.q_proj`, ...), and for `llama` (and `mistral`)
                      the q and k rows put back in Hugging Face's order: llama.cpp's converter
                      permutes them (`LlamaModel.permute`) for its interleaved RoPE. Permuting
                      the rows of weight, scales and biases together is exact, since the groups
                      run along the columns. So every tensor holds the GGUF's bytes, some of
                      them with rows reordered.
  config.json         the hyperparameters from the GGUF metadata, with mlx-lm's `quantization`:
                      the bits of the most common quantized type at the top, and an entry for
                      each layer quantized otherwise (SmolLM2's Q8_0 embedding among Q4_1
                      layers: `"model.embed_tokens": {"group_size": 32, "bits": 8}`), as
                      mlx_lm.convert writes mixed-precision models. mlx-lm 0.32.2 reads those
                      per-layer entries (and would infer them from the shapes anyway).
  tokenizer.json      the tokenizer the GGUF metadata describes, built the way corral-worker
                      rebuilds it (worker/src/gguf/tokenizer.rs): byte-level BPE with the file's
                      vocabulary and merges and the pre-tokenizer `tokenizer.ggml.pre` names
                      (gpt2 style only; SentencePiece GGUFs are refused), control tokens as
                      special tokens.
  tokenizer_config.json  the chat template (`tokenizer.chat_template`) and the special tokens.
  generation_config.json bos and eos ids.

--uniform-bits N requantizes every quantized layer of other bits to N bits (dequantized to f32,
then `mx.quantize` with groups of 32, scales and biases back to float16), so that config.json
needs no per-layer entries. That changes those layers' values (from SmolLM2's Q8_0 embedding to 4
bits it loses precision): the directory is then no longer the GGUF's bytes. It is for a loader that
reads only the top-level quantization (corral-worker at the time of writing).
"""

import json
import sys
from collections import Counter
from pathlib import Path

import mlx.core as mx
import numpy as np
from gguf import GGUFReader
from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

GROUP_SIZE = 32  # MLX's group for every GGUF block type it keeps quantized
QUANTIZED_BITS = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8}
FLOAT_TYPES = {"F32", "F16", "BF16"}

LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

# As in worker/src/gguf/tokenizer.rs.
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TYPE_CONTROL = 3


def hugging_face_name(gguf: str) -> str:
    fixed = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
    if gguf in fixed:
        return fixed[gguf]
    parts = gguf.split(".", 2)
    if len(parts) != 3 or parts[0] != "blk" or parts[2] not in LAYER_NAMES:
        sys.exit(f"tensor {gguf!r} has no Hugging Face name here")
    return f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}"


def unpermute(array: mx.array, heads: int) -> mx.array:
    """Inverse of llama.cpp's LlamaModel.permute on the rows of `array`."""
    rows = array.shape[0]
    half = rows // heads // 2
    rest = array.shape[1:]
    return array.reshape(heads, half, 2, *rest).swapaxes(1, 2).reshape(rows, *rest)


def metadata(reader: GGUFReader) -> dict:
    values = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        values[key] = field.contents()
    return values


def convert_weights(gguf: Path, meta: dict, arch: str):
    types = {t.name: t.tensor_type.name for t in GGUFReader(gguf).tensors}
    for name, kind in types.items():
        if kind not in QUANTIZED_BITS and kind not in FLOAT_TYPES:
            sys.exit(f"{gguf}: tensor {name} is {kind}; MLX keeps only Q4_0, Q4_1, Q8_0 and floats")
    heads = meta[f"{arch}.attention.head_count"]
    kv_heads = meta.get(f"{arch}.attention.head_count_kv", heads)
    permuted = {"attn_q": heads, "attn_k": kv_heads} if arch in ("llama", "mistral") else {}
    arrays = mx.load(str(gguf))
    out = {}
    for name, array in arrays.items():
        base, suffix = name.rsplit(".", 1)
        part = base.split(".")[-1]
        if part in permuted and base.startswith("blk."):
            array = unpermute(array, permuted[part])
        out[f"{hugging_face_name(base)}.{suffix}"] = array
    bits = {
        hugging_face_name(name.removesuffix(".weight")): QUANTIZED_BITS[kind]
        for name, kind in types.items()
        if kind in QUANTIZED_BITS
    }
    return out, bits


def requantize(weights: dict, bits: dict, uniform: int):
    for layer, layer_bits in bits.items():
        if layer_bits == uniform:
            continue
        scales = weights[f"{layer}.scales"]
        dense = mx.dequantize(
            weights[f"{layer}.weight"],
            scales.astype(mx.float32),
            weights[f"{layer}.biases"].astype(mx.float32),
            group_size=GROUP_SIZE,
            bits=layer_bits,
        )
        packed, new_scales, new_biases = mx.quantize(dense, group_size=GROUP_SIZE, bits=uniform)
        weights[f"{layer}.weight"] = packed
        weights[f"{layer}.scales"] = new_scales.astype(scales.dtype)
        weights[f"{layer}.biases"] = new_biases.astype(scales.dtype)
        bits[layer] = uniform
        print(f"{layer}: requantized from {layer_bits} to {uniform} bits")


def quantization(bits: dict) -> dict | None:
    if not bits:
        return None
    common = Counter(bits.values()).most_common(1)[0][0]
    config = {"group_size": GROUP_SIZE, "bits": common, "mode": "affine"}
    for layer, layer_bits in sorted(bits.items()):
        if layer_bits != common:
            config[layer] = {"group_size": GROUP_SIZE, "bits": layer_bits, "mode": "affine"}
    return config


def config_json(meta: dict, arch: str, weights: dict, bits: dict) -> dict:
    if arch not in ("llama", "mistral", "qwen2", "qwen3"):
        sys.exit(f"architecture {arch!r} is not converted (llama, mistral, qwen2, qwen3)")

    def key(name, default=None):
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            sys.exit(f"no {arch}.{name} in the metadata")
        return value

    heads = key("attention.head_count")
    hidden = key("embedding_length")
    vocab = weights["model.embed_tokens.scales"].shape[0] if "model.embed_tokens.scales" in weights \
        else weights["model.embed_tokens.weight"].shape[0]
    config = {
        "architectures": [{"llama": "LlamaForCausalLM", "mistral": "LlamaForCausalLM",
                           "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]],
        "model_type": "llama" if arch == "mistral" else arch,
        "hidden_size": hidden,
        "intermediate_size": key("feed_forward_length"),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": key("attention.head_count_kv", heads),
        "head_dim": key("attention.key_length", hidden // heads),
        "vocab_size": vocab,
        # The shortest text of the file's f32 (1e-05, not 9.999999747378752e-06).
        "rms_norm_eps": float(str(np.float32(key("attention.layer_norm_rms_epsilon")))),
        "rope_theta": key("rope.freq_base", 10000.0),
        "max_position_embeddings": key("context_length", 4096),
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "hidden_act": "silu",
        "attention_bias": "model.layers.0.self_attn.q_proj.bias" in weights,
        "mlp_bias": False,
    }
    if meta.get(f"{arch}.rope.scaling.type", "none") != "none":
        sys.exit("rope scaling is not converted")
    for name in ("bos", "eos"):
        if (token := meta.get(f"tokenizer.ggml.{name}_token_id")) is not None:
            config[f"{name}_token_id"] = token
    if (q := quantization(bits)) is not None:
        config["quantization"] = q
        config["quantization_config"] = q
    return config


def tokenizer_files(meta: dict):
    if meta.get("tokenizer.ggml.model", "gpt2") != "gpt2":
        sys.exit(f"tokenizer.ggml.model {meta['tokenizer.ggml.model']!r}: only gpt2 is converted")
    tokens = meta["tokenizer.ggml.tokens"]
    vocab = {}
    for i, token in enumerate(tokens):
        vocab.setdefault(token, i)
    merges = [tuple(merge.split(" ", 1)) for merge in meta["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(BPE(vocab, merges))
    pre = meta.get("tokenizer.ggml.pre", "default")
    gpt2_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bytes_only = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in ("default", "gpt-2", "gpt2"):
        tokenizer.pre_tokenizer = gpt2_regex
    elif pre == "smollm":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), gpt2_regex]
        )
    elif pre in ("llama-bpe", "llama3", "qwen2", "deepseek-r1-qwen"):
        pattern = LLAMA3_PATTERN if pre in ("llama-bpe", "llama3") else QWEN2_PATTERN
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False), bytes_only]
        )
    else:
        sys.exit(f"pre-tokenizer {pre!r} is not converted")
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=True)
    tokenizer.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type", [])
    tokenizer.add_special_tokens(
        [
            AddedToken(token, special=True, normalized=False)
            for token, kind in zip(tokens, types)
            if kind == TYPE_CONTROL
        ]
    )
    if meta.get("tokenizer.ggml.add_bos_token", False):
        sys.exit("tokenizer.ggml.add_bos_token: a bos post-processor is not converted")

    def token(name):
        token_id = meta.get(f"tokenizer.ggml.{name}_token_id")
        return None if token_id is None else tokens[token_id]

    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": meta.get(f"{meta['general.architecture']}.context_length", 4096),
        "bos_token": token("bos"),
        "eos_token": token("eos"),
        "unk_token": token("unknown"),
        "pad_token": token("padding"),
    }
    if (template := meta.get("tokenizer.chat_template")) is not None:
        tokenizer_config["chat_template"] = template
    generation_config = {
        key: meta[f"tokenizer.ggml.{name}_token_id"]
        for key, name in (("bos_token_id", "bos"), ("eos_token_id", "eos"))
        if f"tokenizer.ggml.{name}_token_id" in meta
    }
    return tokenizer, tokenizer_config, generation_config


def main():
    args = sys.argv[1:]
    uniform = None
    if args[:1] == ["--uniform-bits"] and len(args) > 1:
        uniform = int(args[1])
        args = args[2:]
    if len(args) != 2 or uniform not in (None, 2, 3, 4, 5, 6, 8):
        sys.exit(__doc__)
    gguf, out = Path(args[0]), Path(args[1])
    meta = metadata(GGUFReader(gguf))
    arch = meta["general.architecture"]
    weights, bits = convert_weights(gguf, meta, arch)
    if uniform is not None:
        requantize(weights, bits, uniform)
    config = config_json(meta, arch, weights, bits)
    tokenizer, tokenizer_config, generation_config = tokenizer_files(meta)
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    tokenizer.save(str(out / "tokenizer.json"))
    for name, value in (
        ("config.json", config),
        ("tokenizer_config.json", tokenizer_config),
        ("generation_config.json", generation_config),
    ):
        (out / name).write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    size = sum(array.nbytes for array in weights.values())
    print(f"{out}: {len(weights)} tensors, {size / 2**20:.1f} MiB, quantization {config.get('quantization')}")


if __name__ == "__main__":
    main()
