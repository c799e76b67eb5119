"""mlx-lm's reference logits for a checkpoint, shared by toolchain.py and quant_modes.py.

reference.safetensors: `prompt` int32[P], `decoded` int32[D], `logits` float32[P+D, vocab].
Rows 0..P-1 come from one forward pass over the prompt with a fresh make_prompt_cache(model);
then D greedy steps through that cache, one token each: decoded[0] = argmax(row P-1), row P+i =
the logits after feeding decoded[i], decoded[i+1] = argmax(row P+i). All in float32.
"""

from importlib.metadata import version

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.models.switch_layers import QuantizedSwitchLinear

# mlx-lm's own expert call, before _without_global_scale replaces it.
MLX_LM_SWITCH_CALL = QuantizedSwitchLinear.__call__


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


def prompt_ids(length, vocab_size):
    # Spread over the vocabulary, deterministic, no RNG (the formula of reference_logits.py).
    return [(7 + 131 * i + (i * i) % 17) % vocab_size for i in range(length)]


def vocab_size(config):
    return config.get("text_config", config)["vocab_size"]


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
