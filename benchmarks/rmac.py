"""Benchmark of the R-MAC model: encoding images/s and a training step, each against the backbone alone.

Random-init weights, random uint8 images of one size. Measured in the same run, with the same threads:
  - encode: `RMAC.encode_images` (normalisation, backbone at every scale, R-MAC regions, whitening, sums) against
    the backbone's forward pass alone on the same images at the same scales; ratio = rmac images/s / backbone
    images/s (target at least 0.8);
  - train step: the triplet loss's forward + backward over a batch's distinct images against the backbone's
    forward + backward (sum of its output) on the same images.
Times are CPU seconds of this process (time.process_time), so that other load on a shared machine counts less;
wall seconds are printed too. Prints readable lines, then one JSON object on the last line.

    python benchmarks/rmac.py [--backbone resnet18] [--image-size 224] [--scales 1.0,0.7071] [--batch 16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from vltools.losses import semantic_loss
from vltools.models import build_model


def timed(function, repeats: int) -> tuple[float, float]:
    """Best (CPU seconds, wall seconds) of `repeats` calls after one warm-up call."""
    function()
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        cpu, wall = time.process_time(), time.perf_counter()
        function()
        best = min(best, (time.process_time() - cpu, time.perf_counter() - wall))
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--scales", default="1.0,0.7071")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = build_model("rmac", {"backbone": args.backbone, "scales": args.scales}, 1).eval()
    images = torch.randint(0, 256, (args.batch, 3, args.image_size, args.image_size), dtype=torch.uint8)
    scaled = [model._scaled(images, s) for s in model.scales]

    def encode() -> None:
        with torch.inference_mode():
            model.encode_images(images)

    def backbone_forward() -> None:
        with torch.inference_mode():
            for x in scaled:
                model.backbone(x)

    def train_step() -> None:
        model.zero_grad()
        phi = model.encode_images(images)
        third = len(phi) // 3
        loss = semantic_loss("v", (phi[:third], phi[third:2 * third], phi[2 * third:3 * third]), None, 0.1)
        loss.backward()

    def backbone_step() -> None:
        model.zero_grad()
        total = sum(model.backbone(model._scaled(images, s)).sum() for s in model.scales)
        total.backward()

    figures = {}
    for name, function in (("encode", encode), ("backbone_forward", backbone_forward), ("train_step", train_step),
                           ("backbone_step", backbone_step)):
        cpu, wall = timed(function, args.repeats)
        figures[name] = {"cpu_s": cpu, "wall_s": wall, "images_per_cpu_s": args.batch / cpu}
    figures["encode_ratio"] = figures["backbone_forward"]["cpu_s"] / figures["encode"]["cpu_s"]
    figures["train_ratio"] = figures["backbone_step"]["cpu_s"] / figures["train_step"]["cpu_s"]
    print(f"{args.backbone}, {args.image_size} px, scales {args.scales}, batch {args.batch}; "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} cores")
    print(f"encode: {figures['encode']['images_per_cpu_s']:.1f} images per CPU s; backbone alone "
          f"{figures['backbone_forward']['images_per_cpu_s']:.1f}; ratio {figures['encode_ratio']:.3f}")
    print(f"train step: {figures['train_step']['cpu_s']:.2f} CPU s; backbone forward + backward "
          f"{figures['backbone_step']['cpu_s']:.2f}; ratio {figures['train_ratio']:.3f}")
    print(json.dumps({"backbone": args.backbone, "image_size": args.image_size, "scales": args.scales,
                      "batch": args.batch, "threads": torch.get_num_threads(), **figures}))


if __name__ == "__main__":
    main()
