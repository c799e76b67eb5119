"""Writes the images the vision tests send (tests/data/vision/images/), made by Pillow: several
sizes and aspect ratios, each format a client sends (PNG with and without alpha, JPEG, WebP, an
animated GIF whose first frame counts), and a 1024x768 screenshot-like PNG for the bench."""

import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw


def pattern(width, height, seed):
    """Smooth gradients with noise, so that resampling has something to get wrong."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = [
        127 + 100 * np.sin(x / (3 + seed) + y / 5),
        127 + 100 * np.cos(y / (2 + seed) - x / 7),
        (x * 255 / max(width - 1, 1) + y * 255 / max(height - 1, 1)) / 2,
    ]
    rgb = np.stack(channels, axis=-1) + rng.normal(0, 12, (height, width, 3))
    return np.clip(rgb, 0, 255).astype(np.uint8)


def screenshot(width, height):
    """Flat panels, text-like bars and a few lines, as a desktop screenshot has."""
    image = Image.new("RGB", (width, height), (246, 246, 246))
    draw = ImageDraw.Draw(image)
    draw.rectangle([0, 0, width, 28], fill=(52, 56, 64))
    draw.rectangle([0, 28, 220, height], fill=(232, 234, 238))
    rng = np.random.default_rng(7)
    for row in range(40, height - 20, 18):
        length = int(rng.integers(80, width - 300))
        draw.rectangle([240, row, 240 + length, row + 9], fill=(40, 40, 40))
    for row in range(48, height - 20, 30):
        draw.text((12, row), f"item {row}", fill=(20, 20, 120))
    return image


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pattern(61, 23, 1)).save(out / "wide.png")
    Image.fromarray(pattern(30, 77, 2)).save(out / "tall.jpg", quality=90)
    Image.fromarray(pattern(48, 48, 3)).save(out / "square.webp", lossless=True)
    alpha = np.dstack([pattern(40, 33, 4), np.linspace(0, 255, 40 * 33).reshape(33, 40).astype(np.uint8)])
    Image.fromarray(alpha, "RGBA").save(out / "alpha.png")
    frames = [Image.fromarray(pattern(35, 29, seed)) for seed in (5, 6)]
    frames[0].save(out / "animated.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    screenshot(1024, 768).save(out / "screenshot.png", optimize=True)


if __name__ == "__main__":
    main()
