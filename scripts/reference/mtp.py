"""Checkpoints with their multi-token-prediction layers, as a release ships them, and what
transformers' own MTP forward drafts from them.

Usage: mtp.py SPEC.json OUT_DIR [ARCH ...]

SPEC.json is toolchain.json; each architecture named (by default every one whose spec has an
`"mtp"` layout: `"next_n"` or `"qwen"`) gets OUT_DIR/<arch>/: the toolchain's Hugging Face checkpoint of it (the same
config class, seed and redrawn weights as toolchain.py's `hf`), and beside its layers the
release's MTP layers: past `num_hidden_layers`, `model.layers.{N}.*` as DeepSeek V3 and GLM-4.5
ship them (`next_n`: `enorm`, `hnorm`, `eh_proj`, `shared_head.norm`, the decoder block, and the
copies of the embedding and the head a release carries there), or `mtp.*` as Qwen3.5 ships them
(`qwen`: `pre_fc_norm_embedding`, `pre_fc_norm_hidden`, `fc`, `norm`, `layers.0`; transformers'
Qwen3.5 class ignores them, and its config keeps no MTP keys, so the script sets one full
attention layer, as the release's config says). Their values are transformers' `MtpModel`
(transformers 5's generic MTP, which `generate(use_mtp=True)` drafts with), built on the main
model and redrawn as toolchain.py redraws; the block's names are the ones the main model's own
conversion writes for a layer. The file is then read back by `MtpModel.from_pretrained`, which
refuses a checkpoint missing any MTP weight, and the reference comes from the model it read.

Where llama.cpp's converter keeps the layers (GLM-4.5's, Qwen3.5's; it drops DeepSeek V3's),
OUT_DIR/<arch>-gguf/model.gguf is its `--outtype f32` conversion of the checkpoint, the MTP
layer as `nextn` tensors past the trunk (its block as a layer's); being the same float32
values, it drafts what the checkpoint drafts.

reference.safetensors: `prompt` int32[P], `logits` float32[P, vocab] (the main model's),
`mtp_logits` float32[P-1, vocab]: row i is what the first MTP layer drafts for position i+2
from the main model's last hidden state at position i and the token at position i+1, over one
pass through a fresh MTP cache (transformers' `forward_layer` and `_project_to_logits`).
"""

import json
import shutil
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers.cache_utils import MtpCache
from transformers.core_model_loading import revert_weight_conversion
from transformers.modeling_layers import MtpModel

sys.path.insert(0, str(Path(__file__).parent))
from mlx_reference import prompt_ids  # noqa: E402
from toolchain import save_hf, vocab_size  # noqa: E402
from toolchain_gguf import convert  # noqa: E402

# The architectures whose MTP layers llama.cpp's converter writes.
GGUF_KEEPS_MTP = {"glm4_moe", "qwen3_5"}


# Where each release keeps its MTP layer `depth`: DeepSeek V3's and GLM-4.5's next-n layers
# past the model's layers; Qwen3.5's and Qwen3-Next's under `mtp.`, one layer with its norms
# and projection beside it.
def next_n_names(layer):
    return {
        "prefix": f"model.layers.{layer}.",
        "enorm": "enorm",
        "hnorm": "hnorm",
        "eh_proj": "eh_proj",
        "post_norm": "shared_head.norm",
        "block": f"model.layers.{layer}.",
    }


def qwen_names(depth):
    return {
        "prefix": "mtp.",
        "enorm": "pre_fc_norm_embedding",
        "hnorm": "pre_fc_norm_hidden",
        "eh_proj": "fc",
        "post_norm": "norm",
        "block": f"mtp.layers.{depth}.",
    }


def release_names(model, mtp, depth, layout):
    """The MTP layer `depth`'s weights under the release's names."""
    text = model.config.get_text_config()
    layer = text.num_hidden_layers + depth
    names = next_n_names(layer) if layout == "next_n" else qwen_names(depth)
    prefix = f"layers.{depth}."
    own = {"enorm", "hnorm", "eh_proj", "post_norm"}
    block, named = {}, {}
    for key, tensor in mtp.state_dict().items():
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix):]
        part = rest.split(".", 1)[0]
        if part in own:
            named[f"{names['prefix']}{names[part]}{rest[len(part):]}"] = tensor
        else:
            block[f"model.layers.{layer}.{rest.removeprefix('mtp_block.')}"] = tensor
    # A layer's block as the main model's own conversion writes a layer (experts per expert).
    for key, tensor in revert_weight_conversion(model, block).items():
        named[names["block"] + key.split(f"layers.{layer}.", 1)[1]] = tensor
    if layout == "next_n":
        named[f"model.layers.{layer}.embed_tokens.weight"] = model.get_input_embeddings().weight
        head = model.get_output_embeddings().weight
        named[f"model.layers.{layer}.shared_head.head.weight"] = head
    return {key: tensor.detach().contiguous() for key, tensor in named.items()}


def make(spec, directory, prompt_length):
    config, model = save_hf(spec, directory)

    layout = spec["mtp"]
    text = model.config.get_text_config()
    if layout == "qwen":
        # Qwen3.5's config class keeps no MTP keys (its release's `mtp_num_hidden_layers`);
        # its one MTP layer attends in full.
        text.num_mtp_layers = 1
        text.mtp_layer_types = ["full_attention"]
    mtp = MtpModel(model, text.num_mtp_layers)
    generator = torch.Generator().manual_seed(spec["seed"] + 1)
    with torch.no_grad():
        for name, parameter in sorted(mtp.named_parameters()):
            if not name.startswith("layers."):
                continue  # the embedding and head are the main model's
            if parameter.ndim >= 2:
                bound = 1 / parameter.shape[-1] ** 0.5
                draw = torch.rand(parameter.shape, generator=generator) * 2 - 1
                parameter.copy_(draw * bound)
            else:
                parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    weights_file = directory / "model.safetensors"
    tensors = load_file(str(weights_file))
    for depth in range(text.num_mtp_layers):
        tensors.update(release_names(model, mtp, depth, layout))
    save_file(tensors, str(weights_file), metadata={"format": "pt"})

    # Read back as transformers reads a release's MTP layers. The model class names where they
    # are by the release's layer count (`model.layers.61` for DeepSeek V3); the fixture's is
    # smaller.
    model.config.name_or_path = str(directory)
    model.config.dtype = torch.float32
    first = text.num_hidden_layers
    model._keys_to_ignore_on_load_unexpected = [
        rf"model\.layers\.{first + depth}\..*" if layout == "next_n" else r"^mtp\..*"
        for depth in range(text.num_mtp_layers)
    ]
    mtp = MtpModel.from_pretrained(model)
    mtp.eval()
    prompt = prompt_ids(prompt_length, vocab_size(config))
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
        hidden = out.hidden_states[-1]
        positions = torch.arange(1, prompt_length).unsqueeze(0)
        cache = MtpCache(config=model.config.get_mtp_config())
        drafted = mtp.forward_layer(0, hidden[:, :-1], positions, cache, input_ids=ids[:, 1:])
        mtp_logits = mtp._project_to_logits(drafted)
    ref = {
        "prompt": torch.tensor(prompt, dtype=torch.int32),
        "logits": out.logits[0].float().contiguous(),
        "mtp_logits": mtp_logits[0].float().contiguous(),
    }
    metadata = {"transformers": transformers.__version__, "torch": torch.__version__}
    save_file(ref, str(directory / "reference.safetensors"), metadata=metadata)


def main():
    spec_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    spec = json.loads(spec_path.read_text())
    architectures = spec["architectures"]
    names = sys.argv[3:] or [name for name, arch in architectures.items() if arch.get("mtp")]
    for name in names:
        directory = out / name
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        make(architectures[name], directory, spec["prompt_length"])
        print(f"{name}: {directory}")
        if name in GGUF_KEEPS_MTP:
            gguf = out / f"{name}-gguf"
            shutil.rmtree(gguf, ignore_errors=True)
            gguf.mkdir()
            convert(directory, gguf / "model.gguf", "f32", has_mtp=True)
            print(f"{name}: {gguf}")


if __name__ == "__main__":
    main()
