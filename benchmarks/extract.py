"""Benchmark of `extract-regions`: the whole stage's images/s against the backbone forward alone.

On the same few hundred photos (crops of the real photographs in tests/data/photos, varied sizes, saved
as JPEG in a temporary folder), it measures:
  - stage: `extract-regions --regions grid --global avg` end to end (decoding in DataLoader workers,
    forward passes, HDF5 writing and the final merge of the resumable parts);
  - backbone: the same backbone's forward passes alone on batches decoded beforehand;
  - their ratio (target >= 0.8), and the peak resident memory (main process + largest worker).
Prints readable lines, then one JSON object on the last line.

    python benchmarks/extract.py [--images 200] [--backbone resnet50] [--image-size 224] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vltools.infer.extract import RegionExtractor, extract
from vltools.infer.settings import RunOptions
from vltools.io.progress import configure
from vltools.vision.backbones import normalize
from vltools.vision.images import list_inputs

PHOTOS = Path(__file__).resolve().parent.parent / "tests" / "data" / "photos"


def make_images(folder: Path, count: int, seed: int = 0) -> None:
    """`count` JPEGs: random crops (about 300-640 px wide, landscape or portrait) of the test photographs."""
    rng = np.random.default_rng(seed)
    sources = [Image.open(path).convert("RGB") for path in sorted(PHOTOS.iterdir())]
    for number in range(count):
        source = sources[number % len(sources)]
        w = int(rng.integers(min(300, source.width), source.width + 1))
        h = int(rng.integers(min(200, source.height), source.height + 1))
        x, y = int(rng.integers(0, source.width - w + 1)), int(rng.integers(0, source.height - h + 1))
        crop = source.crop((x, y, x + w, y + h))
        if number % 3 == 0:
            crop = crop.transpose(Image.ROTATE_90)
        crop.save(folder / f"img{number:04d}.jpg", quality=90)


def backbone_rate(extractor: RegionExtractor, items: list, batch_size: int, channels_last: bool) -> float:
    """Images/s of normalisation + forward alone, on uint8 batches decoded and resized beforehand."""
    dataset = extractor.dataset(items)
    images = torch.stack([dataset[i]["image"] for i in range(len(items))])
    model = extractor.backbone.to(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    batches = list(images.split(batch_size))
    with torch.inference_mode():
        model(normalize(batches[0]))  # warm-up
        start = time.perf_counter()
        for batch in batches:
            inputs = normalize(batch.to(extractor.device))
            model(inputs.contiguous(memory_format=torch.channels_last) if channels_last else inputs)
        if extractor.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    extractor.backbone.to(memory_format=torch.channels_last)
    return len(items) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--backbone", default="resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    configure(quiet=True)
    with tempfile.TemporaryDirectory(prefix="vltools-bench-") as tmp:
        folder = Path(tmp) / "images"
        folder.mkdir()
        make_images(folder, args.images)
        items = list_inputs([folder])
        run = RunOptions(batch_size=args.batch_size, workers=args.workers, device=args.device)
        extractor = RegionExtractor(items, run, backbone=args.backbone, weights="none", regions="grid",
                                    global_pool="avg", image_size=args.image_size)
        extract(extractor, items, items[: 2 * args.batch_size], str(Path(tmp) / "warmup.h5"))
        start = time.perf_counter()
        counts = extract(extractor, items, items, str(Path(tmp) / "feats.h5"))
        stage = counts["written"] / (time.perf_counter() - start)
        alone = backbone_rate(extractor, items, args.batch_size, channels_last=True)
        alone_contiguous = backbone_rate(extractor, items, args.batch_size, channels_last=False)
    peak_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
               + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    result = {
        "benchmark": "extract", "device": str(extractor.device), "torch_threads": torch.get_num_threads(),
        "backbone": args.backbone, "image_size": args.image_size, "batch_size": args.batch_size,
        "workers": args.workers, "images": counts["written"], "stage_images_per_s": round(stage, 2),
        "backbone_images_per_s": round(alone, 2), "backbone_contiguous_images_per_s": round(alone_contiguous, 2),
        "ratio": round(stage / alone, 3), "peak_rss_mb": round(peak_mb, 1),
    }
    print(f"stage (decode in {args.workers} workers + forward + write): {stage:.2f} images/s")
    print(f"backbone forward alone (channels-last): {alone:.2f} images/s; contiguous: {alone_contiguous:.2f}")
    print(f"ratio stage / backbone: {stage / alone:.3f} (target >= 0.8); peak RSS {peak_mb:.0f} MB")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
