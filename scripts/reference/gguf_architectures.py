"""Writes each tiny architecture checkpoint of tests/data/architectures (the f32 variant) as the
GGUF llama.cpp's converter (convert_hf_to_gguf.py, as vendored by llama-cpp-python 0.3.36) would
write it, with gguf-py, into OUT/<arch>.gguf (gpt_oss also from its `mxfp4` variant, the experts
as ggml's MXFP4 blocks: OUT/gpt_oss_mxfp4.gguf); and qwen3_moe again split in three parts
(OUT/split/qwen3_moe-0000N-of-00003.gguf, as llama-gguf-split names them).

The converter's per-architecture conventions, reproduced here:
- tensor names from gguf-py's own map for the architecture (`get_tensor_name_map`), experts
  stacked (`blk.N.ffn_gate_exps`), routers as `ffn_gate_inp`, shared experts as `_shexp`,
  GLM's `e_score_correction_bias` as `exp_probs_b.bias`, gpt-oss's `sinks` as `attn_sinks.weight`,
  Phi-3's fused `gate_up_proj` as `ffn_up` and `qkv_proj` as `attn_qkv`;
- granite, mixtral, smollm3 and ministral3 (LlamaModels; Mixtral is written as `llama` with `expert_count`, its experts
  `w1`/`w3`/`w2` stacked as `ffn_gate_exps`/`ffn_up_exps`/`ffn_down_exps`) have their q and k rows
  permuted for llama.cpp's interleaved RoPE (smollm3's NoPE layers are not written: llama.cpp
  hard-codes every fourth);
- gemma4 (Gemma4Model) writes its sliding layers as per-layer flags, its per-layer MLP widths, the
  full layers' head size as `key_length` and the sliding layers' as `key_length_swa`, its norms
  as they are (plain, unlike gemma3's), `layer_scalar` as `layer_output_scale.weight`, and the
  full layers' proportional rotation as the `rope_freqs` tensor (1e30 for unrotated pairs);
- gemma3 stores every `*norm.weight` as `1 + w` (Gemma3RMSNorm's offset);
- Phi-3's longrope factors as the tensors `rope_factors_long`/`rope_factors_short`.

One departure, for a fixture value GGUF cannot state: the gemma3 fixture's
`query_pre_attn_scalar` (32) is not its head_dim (16); llama.cpp scales queries by head_dim^-0.5
(hidden/heads for the 27B), so sqrt(16/32) is folded into `attn_q_norm` (a per-head scale after
the norm), which leaves mlx-lm's attention unchanged for llama.cpp and corral alike.

The tokenizer is a byte-level one of single-byte tokens and one merge (the fixtures have none); what is under test is the forward pass. Run with the gguf==0.19.0 venv:
    python gguf_architectures.py tests/data/architectures tests/data/gguf_architectures
(scripts/reference/gguf_architectures.sh makes that venv and runs it).
"""

import json
import struct
import sys
from pathlib import Path

import gguf
import numpy as np

A = gguf.MODEL_ARCH


def read_safetensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": np.float32, "U32": np.uint32, "U8": np.uint8}[info["dtype"]]
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[start:end], dtype=dtype).reshape(info["shape"]).copy()
    return tensors


def byte_tokens(vocab):
    """GPT-2's byte-to-character table for the first `vocab` bytes."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(vocab)]


def llama_permute(weights, heads, heads_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute."""
    if heads_kv is not None and heads != heads_kv:
        heads = heads_kv
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def mxfp4_blocks(words, exponents):
    """MLX's `mxfp4` experts (codes packed low nibble first, eight to a uint32 word; one e8m0
    exponent per 32) as ggml's MXFP4 blocks: the exponent byte, then 16 bytes whose low nibbles
    hold values 0..15 and high nibbles 16..31 (what the converter's `repack_mxfp4` makes of
    openai's `_blocks`). Both index the same e2m1 codes, so this only moves bits."""
    packed = words.view(np.uint8).reshape(*words.shape[:-1], -1, 16)
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:-1], 32)
    blocks = codes[..., :16] | (codes[..., 16:] << 4)
    return np.concatenate([exponents[..., None], blocks.astype(np.uint8)], axis=-1).reshape(
        *words.shape[:-1], -1
    )


def hf_name(name):
    """mlx-community's names back to Hugging Face's, which the converter maps."""
    name = name.replace(".mlp.switch_mlp.", ".mlp.experts.")
    if name.endswith("e_score_correction_bias"):
        name = name.replace("e_score_correction_bias", "e_score_correction.bias")
    if name.endswith("self_attn.sinks"):
        name += ".weight"
    return name


def common(writer, config):
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config["rope_theta"])
    if "head_dim" in config:
        writer.add_key_length(config["head_dim"])
        writer.add_value_length(config["head_dim"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)


def qwen3_moe(writer, config, tensors):
    common(writer, config)
    writer.add_expert_count(config["num_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])


def gemma3_text(writer, config, tensors):
    common(writer, config)
    writer.add_sliding_window(config["sliding_window"])
    writer.add_sliding_window_pattern(config["sliding_window_pattern"])
    writer.add_rope_freq_base_swa(config["rope_local_base_freq"])
    scaling = config["rope_scaling"]
    writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    writer.add_rope_scaling_factor(scaling["factor"])
    fold = np.float32(np.sqrt(config["head_dim"] / config["query_pre_attn_scalar"]))
    for name in list(tensors):
        if name.endswith("norm.weight"):
            tensors[name] = tensors[name] + np.float32(1.0)
        if name.endswith("q_norm.weight"):
            tensors[name] = tensors[name] * fold


def gpt_oss(writer, config, tensors):
    common(writer, config)
    writer.add_sliding_window(config["sliding_window"])
    writer.add_expert_feed_forward_length(config["intermediate_size"])
    writer.add_expert_count(config["num_local_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])
    scaling = config["rope_scaling"]
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(scaling["factor"])
    writer.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
    writer.add_rope_scaling_yarn_beta_fast(scaling["beta_fast"])
    writer.add_rope_scaling_yarn_beta_slow(scaling["beta_slow"])


def glm4_moe(writer, config, tensors):
    common(writer, config)
    writer.add_rope_dimension_count(int(config["head_dim"] * config["partial_rotary_factor"]))
    writer.add_expert_count(config["n_routed_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])
    writer.add_expert_group_count(config["n_group"])
    writer.add_expert_group_used_count(config["topk_group"])
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    writer.add_expert_shared_count(config["n_shared_experts"])
    writer.add_leading_dense_block_count(config["first_k_dense_replace"])
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_expert_weights_scale(config["routed_scaling_factor"])
    writer.add_expert_weights_norm(config["norm_topk_prob"])


def phi3(writer, config, tensors):
    common(writer, config)
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    rope_dims = int(head_dim * config["partial_rotary_factor"])
    writer.add_rope_dimension_count(rope_dims)
    writer.add_sliding_window(config.get("sliding_window") or 0)
    writer.add_rope_scaling_orig_ctx_len(config["original_max_position_embeddings"])
    scaling = config["rope_scaling"]
    scale = config["max_position_embeddings"] / config["original_max_position_embeddings"]
    attn_factor = float(np.sqrt(1 + np.log(scale) / np.log(config["original_max_position_embeddings"])))
    writer.add_rope_scaling_attn_factors(attn_factor)
    tensors["rope_factors_long.weight"] = np.array(scaling["long_factor"], dtype=np.float32)
    tensors["rope_factors_short.weight"] = np.array(scaling["short_factor"], dtype=np.float32)


def mixtral(writer, config, tensors):
    """Mixtral, which the converter writes as `llama` (LlamaModel): q and k permuted, each layer's
    experts stacked, `expert_count` and `expert_used_count` beside llama's keys."""
    common(writer, config)
    writer.add_rope_dimension_count(config["hidden_size"] // config["num_attention_heads"])
    writer.add_expert_count(config["num_local_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])
    permute_qk(config, tensors)
    for name in list(tensors):
        for ours, theirs in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")):
            if name.endswith(f"switch_mlp.{ours}.weight"):
                tensors[name.replace(f"switch_mlp.{ours}", f"experts.{theirs}")] = tensors.pop(name)


def smollm3(writer, config, tensors):
    """SmolLM3Model, a LlamaModel: q and k permuted. Which layers skip RoPE is not written:
    llama.cpp hard-codes every fourth (`n_no_rope_layer_step = 4`), as the fixture's config has it."""
    assert config["no_rope_layers"] == [int((layer + 1) % 4 != 0) for layer in range(config["num_hidden_layers"])]
    common(writer, config)
    writer.add_rope_dimension_count(config["hidden_size"] // config["num_attention_heads"])
    permute_qk(config, tensors)


def ministral3_text(writer, config, tensors):
    """Ministral3Model (a LlamaModel, `mistral3`): q and k permuted, YaRN, `mscale_all_dim` as
    `rope.scaling.yarn_log_multiplier` and `llama_4_scaling_beta` as
    `attention.temperature_scale` (llama.cpp's query scale floors by the YaRN original context)."""
    rope = config["rope_parameters"]
    common(writer, {**config, "rope_theta": rope["rope_theta"]})
    writer.add_rope_dimension_count(config["head_dim"])
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(rope["factor"])
    writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    writer.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
    writer.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
    writer.add_rope_scaling_yarn_log_mul(rope["mscale_all_dim"])
    writer.add_attn_temperature_scale(rope["llama_4_scaling_beta"])
    permute_qk(config, tensors)


def llama4_gguf(writer, config, tensors):
    """Llama4Model (a LlamaModel that keeps q and k as they are): the dense MLP's width
    (`intermediate_size_mlp`) as `feed_forward_length`, the experts' as
    `expert_feed_forward_length`, `interleave_moe_layer_step`, and llama3 rope scaling as the
    `rope_freqs` tensor (LlamaModel.generate_extra_tensors). Chunked attention, NoPE layers, the
    query temperature and the q/k norms are not written: llama.cpp hard-codes them."""
    common(writer, {**config, "intermediate_size": config["intermediate_size_mlp"]})
    writer.add_rope_dimension_count(config["head_dim"])
    writer.add_interleave_moe_layer_step(config["interleave_moe_layer_step"])
    writer.add_expert_feed_forward_length(config["intermediate_size"])
    writer.add_expert_count(config["num_local_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])
    rope, dim = config["rope_scaling"], config["head_dim"]
    assert rope["rope_type"] == "llama3"
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    factors = []
    for freq in 1.0 / (config["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float32) / dim)):
        wavelen = 2 * np.pi / freq
        if wavelen < old / high:
            factors.append(1.0)
        elif wavelen > old / low:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    tensors["rope_freqs.weight"] = np.array(factors, dtype=np.float32)


def permute_qk(config, tensors):
    heads, heads_kv = config["num_attention_heads"], config["num_key_value_heads"]
    for name in list(tensors):
        if name.endswith("q_proj.weight"):
            tensors[name] = llama_permute(tensors[name], heads, heads)
        elif name.endswith("k_proj.weight"):
            tensors[name] = llama_permute(tensors[name], heads, heads_kv)


def granite(writer, config, tensors):
    common(writer, config)
    writer.add_attention_scale(config["attention_multiplier"])
    writer.add_embedding_scale(config["embedding_multiplier"])
    writer.add_residual_scale(config["residual_multiplier"])
    writer.add_logit_scale(config["logits_scaling"])
    permute_qk(config, tensors)


def gemma4_text(writer, config, tensors):
    """Gemma4Model's metadata: per-layer head sizes and rope bases (`_swa` for the sliding layers),
    the sliding layers as per-layer flags, per-layer MLP widths (doubled in the KV-shared layers),
    and the full layers' proportional rotation as `rope_freqs` (1e30 for the dimensions it leaves
    unrotated). Gemma 4's norms are plain: stored as they are."""
    layers = config["num_hidden_layers"]
    writer.add_block_count(layers)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_head_count(config["num_attention_heads"])
    swa_layers = [kind == "sliding_attention" for kind in config["layer_types"]]
    if config.get("num_global_key_value_heads") is None:
        writer.add_head_count_kv(config["num_key_value_heads"])
    else:
        writer.add_head_count_kv([config["num_key_value_heads"] if sliding else config["num_global_key_value_heads"]
                                  for sliding in swa_layers])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    shared = config["num_kv_shared_layers"]
    writer.add_shared_kv_layers(shared)
    writer.add_embedding_length_per_layer_input(config.get("hidden_size_per_layer_input") or 0)
    writer.add_sliding_window_pattern(swa_layers)
    writer.add_sliding_window(config["sliding_window"])
    full, swa = config["global_head_dim"], config["head_dim"]
    writer.add_key_length(full)
    writer.add_value_length(full)
    writer.add_key_length_swa(swa)
    writer.add_value_length_swa(swa)
    n_ff = config["intermediate_size"]
    if config.get("use_double_wide_mlp"):
        writer.add_feed_forward_length([n_ff if layer < layers - shared else 2 * n_ff for layer in range(layers)])
    else:
        writer.add_feed_forward_length(n_ff)
    rope = config["rope_parameters"]
    writer.add_rope_freq_base(rope["full_attention"]["rope_theta"])
    writer.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    writer.add_rope_dimension_count(full)
    writer.add_rope_dimension_count_swa(int(swa * rope["sliding_attention"].get("partial_rotary_factor", 1.0)))
    writer.add_final_logit_softcapping(config["final_logit_softcapping"])
    rotated = int(full * rope["full_attention"]["partial_rotary_factor"] / 2)
    tensors["rope_freqs.weight"] = np.array([1.0] * rotated + [1e30] * (full // 2 - rotated), dtype=np.float32)
    for name in list(tensors):
        if name.endswith("layer_scalar"):
            tensors[name + ".weight"] = tensors.pop(name)
    if config.get("enable_moe_block"):
        gemma4_experts(writer, config, tensors)


def gemma4_experts(writer, config, tensors):
    """Gemma4Model's experts beside the MLP: the router's projection as `ffn_gate_inp`, its
    `scale` as `ffn_gate_inp.scale`, its `per_expert_scale` as `ffn_down_exps.scale`, the experts
    stacked (gate and up apart, as llama.cpp also loads them)."""
    writer.add_expert_count(config["num_experts"])
    writer.add_expert_used_count(config["top_k_experts"])
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}"
        for ours, theirs in (("router.proj.weight", "ffn_gate_inp.weight"), ("router.scale", "ffn_gate_inp.scale"),
                             ("router.per_expert_scale", "ffn_down_exps.scale"),
                             ("experts.switch_glu.gate_proj.weight", "ffn_gate_exps.weight"),
                             ("experts.switch_glu.up_proj.weight", "ffn_up_exps.weight"),
                             ("experts.switch_glu.down_proj.weight", "ffn_down_exps.weight")):
            tensors[f"blk.{layer}.{theirs}"] = tensors.pop(f"{prefix}.{ours}")


ARCHITECTURES = {
    "qwen3_moe": (A.QWEN3MOE, qwen3_moe),
    "gemma4_text": (A.GEMMA4, gemma4_text),
    "gemma4_text_moe": (A.GEMMA4, gemma4_text),
    "mixtral": (A.LLAMA, mixtral),
    "smollm3": (A.SMOLLM3, smollm3),
    "ministral3_text": (A.MISTRAL3, ministral3_text),
    "llama4_gguf": (A.LLAMA4, llama4_gguf),
    "gemma3_text": (A.GEMMA3, gemma3_text),
    "gpt_oss": (A.GPT_OSS, gpt_oss),
    "glm4_moe": (A.GLM4_MOE, glm4_moe),
    "phi3": (A.PHI3, phi3),
    "granite": (A.GRANITE, granite),
}


def fuse_projections(out, layers):
    """What convert_hf_to_gguf.py's --fuse-qkv and --fuse-gate-up-exps write: q, k and v (weights
    and biases) as one `attn_qkv`, their rows one after another; each layer's expert gate and up
    weights as one `ffn_gate_up_exps`, gate rows first (expert biases stay apart, as there)."""
    fused = {}
    for bid in range(layers):
        for parts, name, suffixes in (
            (("attn_q", "attn_k", "attn_v"), "attn_qkv", ("weight", "bias")),
            (("ffn_gate_exps", "ffn_up_exps"), "ffn_gate_up_exps", ("weight",)),
        ):
            for suffix in suffixes:
                keys = [f"blk.{bid}.{part}.{suffix}" for part in parts]
                if not all(key in out for key in keys):
                    continue
                pieces = [out.pop(key) for key in keys]
                raw_dtype = pieces[0][1]
                axis = 0 if suffix == "bias" else pieces[0][0].ndim - 2
                fused[f"blk.{bid}.{name}.{suffix}"] = (np.concatenate([p[0] for p in pieces], axis=axis), raw_dtype)
    out.update(fused)


def write(fixture, arch, out, split_max_tensors=0, fuse=False, quantize=None):
    config = json.loads((fixture / "config.json").read_text())
    tensors = read_safetensors(fixture / "model.safetensors")
    if "text_config" in config:
        # A multimodal wrapper: the converter writes its text model (the towers go to an mmproj).
        config = config["text_config"]
        tensors = {name.removeprefix("language_model."): data for name, data in tensors.items()
                   if name.startswith("language_model.")}
    gguf_arch, metadata = ARCHITECTURES[arch]
    writer = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[gguf_arch], split_max_tensors=split_max_tensors)
    writer.add_name(f"corral {arch} fixture")
    metadata(writer, config, tensors)
    vocab = config["vocab_size"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    # The last byte's slot holds one merge, since a byte-level vocabulary without merges is not one.
    writer.add_token_list(byte_tokens(vocab - 1) + ["ab"])
    writer.add_token_types([gguf.TokenType.NORMAL] * vocab)
    writer.add_token_merges(["a b"])
    writer.add_eos_token_id(1)
    names = gguf.get_tensor_name_map(gguf_arch, config["num_hidden_layers"])
    # The qwen3_moe fixture's layer 0 is dense (`mlp_only_layers`), which llama.cpp's qwen3moe
    # (every real Qwen3-MoE) lacks: its MLP takes the names every dense architecture uses.
    dense = gguf.get_tensor_name_map(A.QWEN3, config["num_hidden_layers"])
    # GGUF name -> (data, raw ggml type or None for float).
    out = {}
    for name, data in tensors.items():
        if name.endswith(".scales"):
            continue
        scales = name.removesuffix(".weight") + ".scales"
        if name.endswith(".weight") and scales in tensors:
            gguf_name = names.get_name(hf_name(name), try_suffixes=(".weight",))
            out[gguf_name] = (mxfp4_blocks(data, tensors[scales]), gguf.GGMLQuantizationType.MXFP4)
            continue
        if name.startswith(("rope_factors", "rope_freqs", "blk.")):
            gguf_name = name
        else:
            gguf_name = names.get_name(hf_name(name), try_suffixes=(".weight", ".bias"))
            if gguf_name is None and arch == "qwen3_moe":
                gguf_name = dense.get_name(name, try_suffixes=(".weight",))
        assert gguf_name is not None, (arch, name)
        out[gguf_name] = (data, None)
    if fuse:
        fuse_projections(out, config["num_hidden_layers"])
    for gguf_name, (data, raw_dtype) in out.items():
        if raw_dtype is None and quantize:
            raw_dtype = next((qtype for part, qtype in quantize.items() if f".{part}." in gguf_name
                              and gguf_name.endswith(".weight")), None)
            if raw_dtype is not None:
                data = gguf.quants.quantize(data, raw_dtype)
        writer.add_tensor(gguf_name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for arch in ARCHITECTURES:
        write(data / arch / "f32", arch, out / f"{arch}.gguf")
        print(f"wrote {out / arch}.gguf")
    # gpt-oss as openai ships it and ggml-org converts it: the experts in MXFP4.
    write(data / "gpt_oss" / "mxfp4", "gpt_oss", out / "gpt_oss_mxfp4.gguf")
    print(f"wrote {out}/gpt_oss_mxfp4.gguf")
    split = out / "split"
    split.mkdir(exist_ok=True)
    for old in split.glob("*.gguf"):
        old.unlink()
    # 26 tensors in three parts of at most 10.
    write(data / "qwen3_moe" / "f32", "qwen3_moe", split / "qwen3_moe.gguf", split_max_tensors=10)
    print(f"wrote {split}")
    # The converter's fused projections, beside the same model unfused: qwen3_moe with its q, k, v
    # in Q4_1 and its expert gate and up in Q8_0, and gpt-oss with MXFP4 experts and q, k, v
    # biases (its unfused twin is gpt_oss_mxfp4.gguf).
    fused = out / "fused"
    fused.mkdir(exist_ok=True)
    Q = gguf.GGMLQuantizationType
    quantize = {"attn_q": Q.Q4_1, "attn_k": Q.Q4_1, "attn_v": Q.Q4_1, "attn_qkv": Q.Q4_1,
                "ffn_gate_exps": Q.Q8_0, "ffn_up_exps": Q.Q8_0, "ffn_gate_up_exps": Q.Q8_0}
    qwen3_moe_f32 = data / "qwen3_moe" / "f32"
    write(qwen3_moe_f32, "qwen3_moe", fused / "qwen3_moe_quantized.gguf", quantize=quantize)
    write(qwen3_moe_f32, "qwen3_moe", fused / "qwen3_moe_quantized_fused.gguf", fuse=True, quantize=quantize)
    write(data / "gpt_oss" / "mxfp4", "gpt_oss", fused / "gpt_oss_mxfp4_fused.gguf", fuse=True)
    print(f"wrote {fused}")


if __name__ == "__main__":
    main()
