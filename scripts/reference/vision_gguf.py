"""The GGUF layout of vision.py's checkpoints, as llama.cpp's converter writes it: the text
model in one file and the vision tower in a projector file beside it (`--mmproj`), named as the
GGUF repositories and LM Studio's folders name them.

Usage: vision_gguf.py SPEC.json OUT_DIR [ARCH ...]

Runs in hf-venv, as toolchain_gguf.py. For each architecture in SPEC.json with `gguf` (all of
them, or the ones named), OUT_DIR/<arch>/gguf/ gets `<arch>-vl-F32.gguf` (the text model,
`toolchain_gguf.convert`: the pinned converter with the pre-tokenizer registered, `--no-mtp`
where the converter needs it) and `mmproj-<arch>-vl-F32.gguf` (the converter's `--mmproj` on the
same folder), both float32, so that they hold the `hf` folder's weights exactly and transformers'
reference there holds for them too.
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from toolchain_gguf import CONVERTER, convert, run  # noqa: E402


def make_architecture(name, out):
    hf_dir = out / name / "hf"
    gguf_dir = out / name / "gguf"
    shutil.rmtree(gguf_dir, ignore_errors=True)
    gguf_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / name
        shutil.copytree(hf_dir, source, ignore=shutil.ignore_patterns("reference.*"))
        convert(source, gguf_dir / f"{name}-vl-F32.gguf", "f32")
        projector = gguf_dir / f"mmproj-{name}-vl-F32.gguf"
        run([sys.executable, str(CONVERTER), str(source), "--mmproj", "--outtype", "f32", "--outfile", str(projector)])
    return sorted(path.name for path in gguf_dir.iterdir())


def main():
    spec_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    only = sys.argv[3:]
    spec = json.loads(spec_path.read_text())
    for name, arch in spec["architectures"].items():
        if not arch.get("gguf") or (only and name not in only):
            continue
        print(f"{name} gguf: {make_architecture(name, out)}", flush=True)


if __name__ == "__main__":
    main()
