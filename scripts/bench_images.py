#!/usr/bin/env python3
"""A 1024x768 screenshot through a vision model: the tower's encode time and the time to the first
token, cold (an image neither server has seen) and re-sent (the same conversation again, as an
agent re-sends it every turn), for corral and mlx-vlm's server on the same checkpoint. Prints one
markdown table of medians; no assertions.

Two checkpoints with random weights, made by transformers from their config classes and
converted by `mlx_vlm.convert` (float32, as this CPU computes), their vocabulary the vision
fixtures' 160 tokens, so the embedding and head are small, and their processor config the
release's (`--family`):

- `qwen` mirrors Qwen3.5-0.8B: the text model's 24 layers, 18 of them gated DeltaNet, hidden
  1024; the release's tower (12 blocks, hidden 768, patch 16, merge 2); pixel limits
  65536..16777216: the screenshot becomes 48x64 patches, 768 image tokens.
- `gemma4` mirrors Gemma-4-E2B: the release's tower (16 blocks, hidden 768, patch 16, pooling
  3x3, clipped projections, standardized tokens) and 8 of its text model's 35 layers at its
  width (hidden 1536, per-layer inputs), so that the tower weighs as in the release; budget 280
  soft tokens: the screenshot becomes 42x57 patches, 266 image tokens.

Random weights end no answer, so every request asks for one token: the time to it is the
prefill's (tower included) and one step.

Cold passes each send the screenshot with one pixel changed, so that neither server's image or
prefix cache knows it. corral's encode time is its `corral_image_encode_seconds` per request;
mlx-vlm's server does not report one, so its tower is timed in-process on the same pixels
(evaluated), beside the server's figures.

Usage (with the reference venvs `cargo xtask reference` makes; the binaries from `cargo xtask
cargo build --bins`, whose dev profile is optimized):
  build/reference/hf-venv/bin/python scripts/bench_images.py [--family qwen|gemma4]
      [--bin-dir target/debug] [--vlm-python build/reference/vlm-venv/bin/python]
      [--passes 3] [--work DIR]
"""

import argparse
import base64
import io
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The MLX wheels' bundled BLAS is far slower on this CPU than the system's OpenBLAS, which
# corral's MLX links (../shared/peers/README.md preloads it for mlx_lm.server alike).
OPENBLAS = Path("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0")
sys.path.insert(0, str(ROOT / "scripts/reference"))
SCREENSHOT = ROOT / "tests/data/vision/images/screenshot.png"
TEMPLATES = {
    "qwen": ROOT / "tests/data/chat_templates/qwen3.6.jinja",
    "gemma4": ROOT / "tests/data/chat_templates/gemma4.jinja",
}
MODELS = {"qwen": "qwen3_5-0_8b", "gemma4": "gemma4-e2b-tower"}

# Qwen/Qwen3.5-0.8B's config.json, its vocabulary the fixtures' tokenizer's.
TEXT = {
    "vocab_size": 160,
    "hidden_size": 1024,
    "intermediate_size": 3584,
    "num_hidden_layers": 24,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 16,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 6,
    "max_position_embeddings": 262144,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
    },
}
VISION = {
    "depth": 12,
    "hidden_size": 768,
    "num_heads": 12,
    "intermediate_size": 3072,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "num_position_embeddings": 2304,
    "out_hidden_size": 1024,
}
# google/gemma-4-E2B-it's tower and text width, 8 of its text layers.
GEMMA4_TEXT = {
    "vocab_size": 160,
    "hidden_size": 1536,
    "intermediate_size": 6144,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "global_head_dim": 512,
    "sliding_window": 512,
    "layer_types": ["sliding_attention"] * 4 + ["full_attention"] + ["sliding_attention"] * 2 + ["full_attention"],
    "hidden_size_per_layer_input": 256,
    "vocab_size_per_layer_input": 160,
    "final_logit_softcapping": 30.0,
}
GEMMA4_VISION = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 16,
    "num_attention_heads": 12,
    "num_key_value_heads": 12,
    "head_dim": 64,
    "patch_size": 16,
    "pooling_kernel_size": 3,
    "position_embedding_size": 10240,
    "use_clipped_linears": True,
    "standardize": True,
}
GEMMA4_PROCESSOR = {"patch_size": 16, "max_soft_tokens": 280, "pooling_kernel_size": 3}

PROCESSOR = {
    "size": {"shortest_edge": 65536, "longest_edge": 16777216},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}


def make_checkpoint(work: Path, vlm_python: str, family: str) -> Path:
    """transformers' checkpoint, then mlx-vlm's conversion of it; both kept in `work`."""
    mlx_dir = work / "mlx"
    if (mlx_dir / "config.json").exists():
        return mlx_dir
    import torch
    from transformers import AutoModelForImageTextToText

    import vision
    from toolchain import redraw

    hf_dir = work / "hf"
    shutil.rmtree(hf_dir, ignore_errors=True)
    hf_dir.mkdir(parents=True)
    template = TEMPLATES[family].read_text()
    if family == "qwen":
        tok = vision.tokenizer(TEXT["vocab_size"])
        processor = vision.make_qwen_processor({"image_processor": PROCESSOR}, {}, tok, template)
        spec = {"config": {"model_type": "qwen3_5", "text_config": TEXT, "vision_config": VISION}}
        config = vision.build_config(spec, tok)
    else:
        tok = vision.gemma4_tokenizer(GEMMA4_TEXT["vocab_size"])
        arch = {"image_processor": GEMMA4_PROCESSOR}
        processor = vision.make_gemma4_processor({}, arch, tok, template)
        spec = {"config": {"model_type": "gemma4", "text_config": GEMMA4_TEXT, "vision_config": GEMMA4_VISION}}
        config = vision.gemma4_config(spec, tok)
    torch.manual_seed(5)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    redraw(model, 5)
    if family == "gemma4":
        vision.gemma4_buffers(model, 5)
    model.save_pretrained(hf_dir, save_original_format=False)
    vision.save_processor(processor, hf_dir, nested=family == "gemma4")
    del model
    # mlx-vlm reads keys the releases also have, which transformers 5 no longer writes.
    config_path = hf_dir / "config.json"
    values = json.loads(config_path.read_text())
    if family == "qwen":
        values["text_config"]["full_attention_interval"] = 4
    else:
        values["text_config"]["global_head_dim"] = GEMMA4_TEXT["global_head_dim"]
    config_path.write_text(json.dumps(values, indent=2))
    subprocess.run(
        [vlm_python, "-m", "mlx_vlm", "convert", "--hf-path", str(hf_dir), "--mlx-path", str(mlx_dir)],
        check=True,
    )
    return mlx_dir


def screenshot(variant: int) -> str:
    """The screenshot as a PNG data URL; a variant above 0 has its first pixel changed."""
    from PIL import Image

    image = Image.open(SCREENSHOT).convert("RGB")
    if variant:
        image.putpixel((0, 0), (variant % 256, (variant * 7) % 256, 11))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def post(url: str, body: dict, timeout: float = 900) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def wait_ready(url: str, process: subprocess.Popen, seconds: float = 600):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}")
        try:
            get(url)
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.5)
    raise SystemExit(f"{url} not ready in {seconds} s")


def chat(model: str, image: str) -> dict:
    return {
        "model": model,
        "max_tokens": 1,
        "temperature": 0,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": image}},
                    {"type": "text", "text": "Click the first item."},
                ],
            }
        ],
    }


def encode_seconds(base: str) -> float:
    """corral's total tower time so far, from /metrics."""
    text = get(f"{base}/metrics")
    match = re.search(r'corral_image_encode_seconds_sum\{model="[^"]*"\} ([0-9.e+-]+)', text)
    return float(match.group(1)) if match else 0.0


def timed(url: str, body: dict) -> float:
    started = time.perf_counter()
    post(url, body)
    return time.perf_counter() - started


def run_server(label, command, env, health, chat_url, model, passes, variant_base, metrics_base=None):
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        wait_ready(health, process)
        # The first request loads the model (corral starts its worker on demand) and warms up.
        post(chat_url, chat(model, screenshot(variant_base)))
        cold, warm, encode = [], [], []
        for index in range(passes):
            image = screenshot(variant_base + 1 + index)
            before = encode_seconds(metrics_base) if metrics_base else 0.0
            cold.append(timed(chat_url, chat(model, image)))
            if metrics_base:
                encode.append(encode_seconds(metrics_base) - before)
            warm.append(timed(chat_url, chat(model, image)))
        return {"label": label, "cold": cold, "warm": warm, "encode": encode}
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


MLX_VLM_TOWER = """
import statistics, sys, time
import mlx.core as mx
from mlx_vlm import load
from mlx_vlm.utils import load_image, prepare_inputs
model, processor = load(sys.argv[1])
if sys.argv[4] == "qwen":
    inputs = processor.image_processor(images=[load_image(sys.argv[2])], return_tensors="np")
    pixels = mx.array(inputs["pixel_values"])
    grid = mx.array(inputs["image_grid_thw"])
    encode = lambda: model.vision_tower(pixels, grid)
else:
    # mlx-vlm's Gemma 4 processor hands its tower whole images.
    pixels = prepare_inputs(processor, images=[sys.argv[2]], prompts=["<|image|>"])["pixel_values"]
    encode = lambda: model.encode_image(pixels)
times = []
for _ in range(int(sys.argv[3]) + 1):
    started = time.perf_counter()
    features = encode()
    mx.eval(features)
    times.append(time.perf_counter() - started)
print(statistics.median(times[1:]), tuple(pixels.shape))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=sorted(MODELS), default="qwen")
    parser.add_argument("--bin-dir", default=str(ROOT / "target/debug"))
    parser.add_argument("--vlm-python", default=str(ROOT / "build/reference/vlm-venv/bin/python"))
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--port", type=int, default=18250)
    parser.add_argument("--work", default=None, help="keeps the checkpoint between runs")
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="corral-bench-images-"))
    work.mkdir(parents=True, exist_ok=True)
    mlx_dir = make_checkpoint(work, args.vlm_python, args.family)
    model = MODELS[args.family]

    models = work / "models"
    models.mkdir(exist_ok=True)
    link = models / model
    if not link.exists():
        link.symlink_to(mlx_dir)
    state = work / "corral-state"
    shutil.rmtree(state, ignore_errors=True)
    corral_base = f"http://127.0.0.1:{args.port}"
    corral = run_server(
        "corral",
        [f"{args.bin_dir}/corral", "serve", "--host", "127.0.0.1", "--port", str(args.port),
         "--models-dir", str(models), "--state-dir", str(state)],
        dict(os.environ),
        f"{corral_base}/health",
        f"{corral_base}/v1/chat/completions",
        model,
        args.passes,
        1000,
        metrics_base=corral_base,
    )
    print(f"corral: {corral}", flush=True)
    vlm_env = dict(os.environ)
    if OPENBLAS.exists():
        vlm_env["LD_PRELOAD"] = str(OPENBLAS)
    vlm_base = f"http://127.0.0.1:{args.port + 1}"
    vlm = run_server(
        "mlx-vlm server",
        [args.vlm_python, "-m", "mlx_vlm.server", "--model", str(mlx_dir), "--host", "127.0.0.1",
         "--port", str(args.port + 1)],
        vlm_env,
        f"{vlm_base}/health",
        f"{vlm_base}/v1/chat/completions",
        str(mlx_dir),
        args.passes,
        2000,
    )
    tower = subprocess.run(
        [args.vlm_python, "-c", MLX_VLM_TOWER, str(mlx_dir), str(SCREENSHOT), str(args.passes), args.family],
        check=True, capture_output=True, text=True, env=vlm_env,
    ).stdout.split()[0]
    vlm["encode"] = [float(tower)]
    print(f"mlx-vlm: {vlm}", flush=True)

    def median(values):
        return f"{statistics.median(values):.2f}" if values else "n/a"

    shape = {
        "qwen": "768 image tokens, Qwen3.5-0.8B-shaped",
        "gemma4": "266 image tokens, Gemma-4-E2B's tower and 8 text layers",
    }[args.family]
    print(f"\n1024x768 screenshot ({shape} random weights), float32, medians of {args.passes} passes, seconds\n")
    print("| server | tower encode | TTFT cold | TTFT re-sent | cold / re-sent |")
    print("|---|---|---|---|---|")
    for row in (corral, vlm):
        ratio = statistics.median(row["cold"]) / statistics.median(row["warm"])
        encode = median(row["encode"]) + (" (in-process)" if row is vlm else "")
        print(f"| {row['label']} | {encode} | {median(row['cold'])} | {median(row['warm'])} | {ratio:.1f}x |")
    print(f"\ncorral / mlx-vlm, TTFT cold: {statistics.median(corral['cold']) / statistics.median(vlm['cold']):.2f}; "
          f"re-sent: {statistics.median(corral['warm']) / statistics.median(vlm['warm']):.2f}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
