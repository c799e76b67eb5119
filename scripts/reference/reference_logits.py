"""Teacher-forced logits of mlx-lm over the fixture models, for corral's agreement tests.

Usage: reference_logits.py OUT.json NAME=DIR [NAME=DIR ...]

For each model the same fixed token sequence is run through mlx-lm's forward pass in one call,
and the full logit rows at a few positions are written out with the top-two gap at each, so
the Rust test can compare logits within a tolerance and greedy tokens where the gap is wide.
"""

import json
import sys
from importlib.metadata import version
from pathlib import Path

import mlx.core as mx
from mlx_lm.utils import load_model

SEQUENCE_LENGTH = 48
POSITIONS = [0, 1, 7, 20, 33, 47]


def fixed_tokens(vocab_size):
    # Spread over the tokenizer's whole range, deterministic, no RNG needed.
    return [(7 + 131 * i + (i * i) % 17) % vocab_size for i in range(SEQUENCE_LENGTH)]


def reference(model_dir):
    model, config = load_model(Path(model_dir))
    tokens = fixed_tokens(min(config["vocab_size"], 1000))
    logits = model(mx.array(tokens)[None]).astype(mx.float32)[0]
    mx.eval(logits)
    rows = []
    for position in POSITIONS:
        row = logits[position].tolist()
        top = sorted(row, reverse=True)[:2]
        rows.append({"position": position, "top_two_gap": top[0] - top[1], "logits": row})
    return {"tokens": tokens, "rows": rows}


def main():
    out = Path(sys.argv[1])
    models = {}
    for argument in sys.argv[2:]:
        name, model_dir = argument.split("=", 1)
        models[name] = reference(model_dir)
    document = {
        "mlx": version("mlx"),
        "mlx_lm": version("mlx-lm"),
        "models": models,
    }
    out.write_text(json.dumps(document, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
