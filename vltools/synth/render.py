"""Draw a scene: an RGB image (solid shapes on a plain light background of varying tint) and its foreground mask.

Shapes are drawn at 4x resolution and averaged down, so edges are smooth; a pixel belongs to an object's
mask when at least half of it is covered. Each object's box is the tight box of its own mask pixels
(x1, y1 inclusive; x2, y2 exclusive, in pixels), so mask pixels always lie inside the union of the boxes.
"""

from __future__ import annotations

import io
import math
from dataclasses import replace

import numpy as np
from PIL import Image, ImageDraw

from vltools.synth.scene import COLOURS, Obj, Scene

SUPERSAMPLE = 4
BACKGROUND = (226, 246)  # range of each channel of an image's plain, light background colour


def _outline(obj: Obj, scale: int) -> list[tuple[float, float]] | None:
    """Polygon of the shape in supersampled pixel coordinates, or None for a circle."""
    cx, cy, r = (obj.cx + 0.5) * scale, (obj.cy + 0.5) * scale, obj.radius * scale

    def ring(count: int, radius: float, start: float) -> list[tuple[float, float]]:
        return [(cx + radius * math.cos(start + 2 * math.pi * k / count),
                 cy + radius * math.sin(start + 2 * math.pi * k / count)) for k in range(count)]

    if obj.shape == "circle":
        return None
    if obj.shape == "square":
        return ring(4, r, math.pi / 4)
    if obj.shape == "diamond":
        return [(cx, cy - r), (cx + 0.7 * r, cy), (cx, cy + r), (cx - 0.7 * r, cy)]
    if obj.shape == "triangle":
        return ring(3, r, -math.pi / 2)
    if obj.shape == "star":
        outer, inner = ring(5, r, -math.pi / 2), ring(5, 0.45 * r, -math.pi / 2 + math.pi / 5)
        return [p for pair in zip(outer, inner, strict=True) for p in pair]
    if obj.shape == "cross":
        a, b = 0.3 * r, 0.95 * r
        return [(cx - a, cy - b), (cx + a, cy - b), (cx + a, cy - a), (cx + b, cy - a), (cx + b, cy + a),
                (cx + a, cy + a), (cx + a, cy + b), (cx - a, cy + b), (cx - a, cy + a), (cx - b, cy + a),
                (cx - b, cy - a), (cx - a, cy - a)]
    raise ValueError(f"unknown shape {obj.shape!r}")


def coverage(obj: Obj, side: int) -> tuple[np.ndarray, int, int]:
    """Fraction (0..1) of each pixel covered by the object, over the square of pixels around it that can be
    covered; returned with that square's top-left corner (x, y) on the `side` x `side` canvas."""
    x0, y0 = max(0, obj.cx - obj.radius - 1), max(0, obj.cy - obj.radius - 1)
    x1, y1 = min(side, obj.cx + obj.radius + 2), min(side, obj.cy + obj.radius + 2)
    width, height = x1 - x0, y1 - y0
    big = Image.new("L", (width * SUPERSAMPLE, height * SUPERSAMPLE), 0)
    draw = ImageDraw.Draw(big)
    local = replace(obj, cx=obj.cx - x0, cy=obj.cy - y0)
    polygon = _outline(local, SUPERSAMPLE)
    if polygon is None:
        cx, cy, r = (local.cx + 0.5) * SUPERSAMPLE, (local.cy + 0.5) * SUPERSAMPLE, 0.92 * obj.radius * SUPERSAMPLE
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=255)
    else:
        draw.polygon(polygon, fill=255)
    cells = np.asarray(big, dtype=np.float32).reshape(height, SUPERSAMPLE, width, SUPERSAMPLE)
    return cells.mean(axis=(1, 3)) / 255.0, x0, y0


def render(scene: Scene, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """(RGB image uint8 HxWx3, mask uint8 HxW with 0/255, one [x1, y1, x2, y2] box per object)."""
    side = scene.side
    background = rng.integers(BACKGROUND[0], BACKGROUND[1] + 1, size=3).astype(np.float32)
    image = np.broadcast_to(background, (side, side, 3)).copy()
    mask = np.zeros((side, side), dtype=np.uint8)
    boxes = []
    for obj in scene.objects:
        alpha, x0, y0 = coverage(obj, side)
        rows, cols = slice(y0, y0 + alpha.shape[0]), slice(x0, x0 + alpha.shape[1])
        colour = np.array(COLOURS[obj.colour], dtype=np.float32)
        image[rows, cols] = image[rows, cols] * (1 - alpha[..., None]) + colour * alpha[..., None]
        inside = alpha >= 0.5
        mask[rows, cols][inside] = 255
        ys, xs = np.nonzero(inside)
        boxes.append([x0 + int(xs.min()), y0 + int(ys.min()), x0 + int(xs.max()) + 1, y0 + int(ys.max()) + 1])
    return np.round(image).astype(np.uint8), mask, boxes


def png_bytes(array: np.ndarray) -> bytes:
    """PNG encoding of an RGB or single-channel uint8 array, with no timestamp or other metadata."""
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()
