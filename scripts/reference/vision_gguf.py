"""The GGUF layout of vision.py's checkpoints, as llama.cpp's converter writes it: the text
model in one file and the vision tower in a projector file beside it (`--mmproj`), named as the
GGUF repositories and LM Studio's folders name them.

Usage: vision_gguf.py SPEC.json IMAGES_DIR OUT_DIR LLAMA_CPP_PYTHON [ARCH ...]

Runs in hf-venv, as toolchain_gguf.py. For each architecture in SPEC.json with `gguf` (all of
them, or the ones named), OUT_DIR/<arch>/gguf/ gets `<arch>-vl-F32.gguf` (the text model,
`toolchain_gguf.convert`: the pinned converter with the pre-tokenizer registered, `--no-mtp`
where the converter needs it) and `mmproj-<arch>-vl-F32.gguf` (the converter's `--mmproj` on the
same folder), both float32 (but what the converter always writes otherwise), so that they hold
the `hf` folder's weights and transformers' reference there holds for them too. The converter
reads the folder as the release spells it (vision_spelling.py, the spec's `release_spelling`).
Where the spec gives a `case` (one image, which llama.cpp's pixel limits leave at its size),
also llama.cpp's own answer to it: the chat rendered by the `hf` folder's template, the image's
placeholder given to llama.cpp's `mtmd` as its media marker (llama_cpp_mtmd.py, in
LLAMA_CPP_PYTHON), into reference.safetensors and reference.json.
"""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image
from safetensors.numpy import save_file
from transformers import PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).parent))
from toolchain_gguf import CONVERTER, LLAMA_CPP_VERSION, QUANTIZE, SDIST, convert, run  # noqa: E402
from vision_spelling import release_spelled  # noqa: E402

# What Qwen's chat template writes for an image, which mtmd writes around the image itself.
QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


def llama_cpp_answer(llama_python, gguf_dir, name, hf_dir, case, images, steps):
    """llama.cpp's logits and greedy steps for one chat with one image."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(hf_dir)
    template = (hf_dir / "chat_template.jinja").read_text()
    messages = json.loads(json.dumps(case["messages"]))
    for message in messages:
        for part in message["content"] if isinstance(message["content"], list) else []:
            if part["type"] == "image":
                image = part.pop("image")
    prompt = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False, add_generation_prompt=True)
    assert prompt.count(QWEN_IMAGE) == 1, prompt
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=str(QUANTIZE.parent), MTMD_CPP_LIB=str(QUANTIZE.parent), PYTHONPATH=str(SDIST))
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        np.save(scratch / "pixels.npy", np.asarray(Image.open(images / image).convert("RGB"), dtype=np.uint8))
        (scratch / "prompt.txt").write_text(prompt.replace(QWEN_IMAGE, "<__media__>"), encoding="utf-8")
        run([llama_python, str(Path(__file__).parent / "llama_cpp_mtmd.py"), str(gguf_dir / f"{name}-vl-F32.gguf"),
             str(gguf_dir / f"mmproj-{name}-vl-F32.gguf"), str(scratch / "pixels.npy"), str(scratch / "prompt.txt"),
             str(steps), str(scratch / "out.npz")], env=env)
        with np.load(scratch / "out.npz") as arrays:
            return prompt, {key: arrays[key].copy() for key in arrays.files}


def llama_cpp_image_tokens(llama_python, gguf_dir, name, spec, images):
    """The tokens llama.cpp's `mtmd` gives each of the spec's images with this projector (its own
    sizing), by file name."""
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=str(QUANTIZE.parent), MTMD_CPP_LIB=str(QUANTIZE.parent), PYTHONPATH=str(SDIST))
    counts = {}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        (scratch / "prompt.txt").write_text("<__media__>", encoding="utf-8")
        for file in spec["images"]:
            np.save(scratch / "pixels.npy", np.asarray(Image.open(images / file).convert("RGB"), dtype=np.uint8))
            run([llama_python, str(Path(__file__).parent / "llama_cpp_mtmd.py"), str(gguf_dir / f"{name}-vl-F32.gguf"),
                 str(gguf_dir / f"mmproj-{name}-vl-F32.gguf"), str(scratch / "pixels.npy"), str(scratch / "prompt.txt"),
                 "tokens", str(scratch / "out.npz")], env=env)
            with np.load(scratch / "out.npz") as arrays:
                counts[file] = int(arrays["image_tokens"][0])
    return counts


def make_architecture(name, arch, spec, images, out, llama_python):
    hf_dir = out / name / "hf"
    gguf_dir = out / name / "gguf"
    shutil.rmtree(gguf_dir, ignore_errors=True)
    gguf_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as scratch:
        # The converter names the model after its folder.
        source = release_spelled(arch, hf_dir, scratch).rename(Path(scratch) / name)
        convert(source, gguf_dir / f"{name}-vl-F32.gguf", "f32")
        projector = gguf_dir / f"mmproj-{name}-vl-F32.gguf"
        run([sys.executable, str(CONVERTER), str(source), "--mmproj", "--outtype", "f32", "--outfile", str(projector)])
    record = {"made_by": f"{LLAMA_CPP_VERSION}'s convert_hf_to_gguf.py (--mmproj for the projector), float32"}
    if arch["gguf"].get("image_tokens"):
        record["llama_cpp_image_tokens"] = llama_cpp_image_tokens(llama_python, gguf_dir, name, spec, images)
    case = arch["gguf"].get("case")
    if case is None:
        record["no_llama_cpp_answer"] = arch["gguf"]["why"]
    else:
        prompt, answer = llama_cpp_answer(llama_python, gguf_dir, name, hf_dir, case, images, spec["decode_steps"])
        tensors = {key: np.ascontiguousarray(value) for key, value in answer.items()}
        save_file(tensors, str(gguf_dir / "reference.safetensors"))
        record |= {
            "reference": f"{LLAMA_CPP_VERSION}'s mtmd (mtmd_helper_eval_chunks), one thread",
            "messages": case["messages"],
            "prompt": prompt,
            "positions": int(answer["positions"][0]),
            "decoded": answer["decoded"].tolist(),
        }
    (gguf_dir / "reference.json").write_text(json.dumps(record, indent=1) + "\n")
    return sorted(path.name for path in gguf_dir.iterdir())


def main():
    spec_path, images, out, llama_python = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    only = sys.argv[5:]
    spec = json.loads(spec_path.read_text())
    for name, arch in spec["architectures"].items():
        if "gguf" not in arch or (only and name not in only):
            continue
        print(f"{name} gguf: {make_architecture(name, arch, spec, images, out, llama_python)}", flush=True)


if __name__ == "__main__":
    main()
