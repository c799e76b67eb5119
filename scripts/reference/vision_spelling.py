"""A vision checkpoint as a tool reads the release: transformers 5 spells some of a release's
keys and tensor names otherwise, and mlx-vlm and llama.cpp's converter read the release's."""

import json
import shutil
from pathlib import Path

from safetensors.numpy import load_file, save_file


def release_spelled(spec, hf_dir, scratch):
    """A copy of `hf` without the reference files, its text config given the keys the release
    has and transformers 5 no longer writes (`release_spelling.release_keys` in the spec), its
    tensors named as the release names them where transformers 5 names them otherwise
    (`release_spelling.release_tensor_prefixes`)."""
    copy = Path(scratch) / "hf"
    shutil.copytree(hf_dir, copy, ignore=shutil.ignore_patterns("reference.*"))
    config = json.loads((copy / "config.json").read_text())
    spelling = spec.get("release_spelling", {})
    config["text_config"].update(spelling.get("release_keys", {}))
    config["vision_config"].update(spelling.get("release_vision_keys", {}))
    (copy / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    renames = spelling.get("release_tensor_prefixes", {})
    for path in copy.glob("*.safetensors") if renames else []:
        tensors = load_file(str(path))
        for old, new in renames.items():
            tensors = {(new + key[len(old):] if key.startswith(old) else key): value for key, value in tensors.items()}
        save_file(tensors, str(path), metadata={"format": "pt"})
    return copy
