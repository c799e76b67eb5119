"""For each served architecture, a minimal config.json keeping only the keys every decoder needs
(their values the transformers config class's defaults), and the config.json that class writes
when it reads that minimal one, every default written out, so a test can check that corral reads
each key a release leaves out as transformers defaults it.

Usage: config_defaults.py OUT.json TYPE [TYPE ...]

TYPEs are corral's served `model_type`s (`corral_worker::model::SUPPORTED_ARCHITECTURES`). A
type transformers has no config class for is recorded under "skipped" with the reason. A
wrapper (a config with `text_config`) keeps its text config nested, without its other towers'
configs, which the worker never reads.
"""

import json
import math
import sys
from importlib.metadata import version

from transformers import AutoConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

# The keys every decoder needs: the shape of the model, which no release leaves out.
NEEDED = [
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "rms_norm_eps",
    "norm_eps",
    "layer_norm_epsilon",
    # Nemotron-H's layer list is its layer count: it writes no num_hidden_layers.
    "layers_block_type",
]


def without_towers(config):
    """The config less its other towers' nested configs (vision, audio)."""
    return {
        key: value
        for key, value in config.items()
        if key == "text_config" or not key.endswith("_config")
    }


def finite(value):
    """`value` with each non-finite float as its name ("inf"), which JSON cannot hold
    (Nemotron-H's `time_step_limit`, a key corral does not read)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [finite(item) for item in value]
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    return value


def minimal(config):
    kept = {key: config[key] for key in NEEDED if key in config}
    if "text_config" in config:
        kept["text_config"] = minimal(config["text_config"])
    return kept


def main():
    out, types = sys.argv[1], sys.argv[2:]
    entries, skipped = {}, {}
    for model_type in types:
        if model_type not in CONFIG_MAPPING_NAMES:
            skipped[model_type] = f"transformers {version('transformers')} has no config class"
            continue
        kept = minimal(without_towers(AutoConfig.for_model(model_type).to_dict()))
        # What the class reads the minimal config as, every default written out: for a wrapper
        # its text config's own class defaults, not the wrapper's default text config.
        full = finite(without_towers(AutoConfig.for_model(**kept).to_dict()))
        for key in ("transformers_version", "architectures", "_name_or_path"):
            full.pop(key, None)
            full.get("text_config", {}).pop(key, None)
        entries[model_type] = {"full": full, "minimal": kept}
    with open(out, "w") as file:
        json.dump(
            {
                "transformers": version("transformers"),
                "configs": entries,
                "skipped": skipped,
            },
            file,
            indent=1,
            allow_nan=False,
            sort_keys=True,
        )
        file.write("\n")


if __name__ == "__main__":
    main()
