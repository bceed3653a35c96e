"""Benchmark of `extract-regions`: the whole stage's images/s against the network's forward passes alone.

On the same photos (crops of the real photographs in tests/data/photos, saved as JPEG in a temporary folder),
with random-initialised weights, it measures for `--regions grid` (the default):
  - stage: `extract-regions --regions grid --global avg` end to end (decoding in DataLoader workers,
    forward passes, HDF5 writing and the final merge of the resumable parts);
  - backbone: the same backbone's forward passes alone on batches decoded beforehand;
  - their ratio (target >= 0.8), and the peak resident memory (main process + largest worker);
and for `--regions bottom-up` (the released detector's size: ResNet-101 C4, 1600 classes, 400 attributes; photos
of 600 x 900 pixels, landscape and portrait; 10 to 100 boxes an image, 2048-d):
  - stage: `extract-regions --regions bottom-up --min-regions 10 --max-regions 100` end to end;
  - forward: the detector's forward passes alone (its resize, detection and the released choice of boxes, as the
    stage calls it) on the same batches decoded beforehand, and the time of each of its parts (res5 head...);
  - overhead = stage time / forward time - 1 (target < 0.1), and the peak resident memory.
`--threads 1,2` runs the whole measurement once per torch thread count, each in a fresh process. Prints readable
lines with the CPU, the thread counts and the load average before and after each figure, then one JSON object on
the last line.

    python benchmarks/extract.py [--regions grid] [--images 200] [--backbone resnet50] [--image-size 224] \
        [--batch-size 8] [--workers 1] [--threads 1,2]
    python benchmarks/extract.py --regions bottom-up [--images 20] [--warmup 1] [--threads 1,2] [--precision fp32]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from machine import cpu_model, load_average
from PIL import Image

from vltools.devices import PRECISIONS, autocast
from vltools.infer.bottom_up import BottomUpExtractor
from vltools.infer.extract import RegionExtractor, extract
from vltools.infer.settings import RunOptions
from vltools.io.checkpoints import save_checkpoint
from vltools.io.features import FeaturesReader
from vltools.io.progress import configure
from vltools.models import schema_version
from vltools.models.bottom_up import BottomUpAttention
from vltools.vision.backbones import normalize
from vltools.vision.images import list_inputs

PHOTOS = Path(__file__).resolve().parent.parent / "tests" / "data" / "photos"
DEFAULT_IMAGES = {"grid": 200, "bottom-up": 20}
RELEASED_SIZE = (900, 600)  # width, height: the detector's resize (shorter side 600, longer <= 1000) keeps it
OVERHEAD_TARGET = 0.1


def make_images(folder: Path, count: int, seed: int = 0, size: tuple[int, int] | None = None) -> None:
    """`count` JPEGs: random crops (about 300-640 px wide) of the test photographs, resized to `size` (width,
    height) when given; every third is turned to portrait."""
    rng = np.random.default_rng(seed)
    sources = [Image.open(path).convert("RGB") for path in sorted(PHOTOS.iterdir())]
    for number in range(count):
        source = sources[number % len(sources)]
        w = int(rng.integers(min(300, source.width), source.width + 1))
        h = int(rng.integers(min(200, source.height), source.height + 1))
        x, y = int(rng.integers(0, source.width - w + 1)), int(rng.integers(0, source.height - h + 1))
        crop = source.crop((x, y, x + w, y + h))
        if size is not None:
            crop = crop.resize(size, Image.BILINEAR)
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


def peak_rss_mb() -> dict[str, float]:
    """Peak resident memory in MB of this process, of its largest finished child (a DataLoader worker, which
    counts the pages it shares with this process when forked), and their sum."""
    main, worker = (resource.getrusage(who).ru_maxrss / 1024
                    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return {"peak_rss_mb": round(main + worker, 1), "peak_rss_main_mb": round(main, 1),
            "peak_rss_worker_mb": round(worker, 1)}


def loads(label: str, before: tuple[float, ...]) -> dict[str, tuple[float, ...]]:
    """Print the load average before and after a figure (other work on the machine slows it) and return both."""
    after = load_average()
    print(f"  {label}: load average before {' '.join(map(str, before))}, after {' '.join(map(str, after))}",
          flush=True)
    return {"load_before": before, "load_after": after}


def grid(args: argparse.Namespace, tmp: Path) -> dict:
    """`extract-regions --regions grid --global avg` against the backbone alone."""
    folder = tmp / "images"
    folder.mkdir()
    make_images(folder, args.images)
    items = list_inputs([folder])
    run = RunOptions(batch_size=args.batch_size, workers=args.workers, device=args.device)
    extractor = RegionExtractor(items, run, backbone=args.backbone, weights="none", regions="grid",
                                global_pool="avg", image_size=args.image_size)
    extract(extractor, items, items[: 2 * args.batch_size], str(tmp / "warmup.h5"))
    before = load_average()
    start = time.perf_counter()
    counts = extract(extractor, items, items, str(tmp / "feats.h5"))
    stage = counts["written"] / (time.perf_counter() - start)
    print(f"stage (decode in {args.workers} workers + forward + write): {stage:.2f} images/s", flush=True)
    stage_load = loads("stage", before)
    before = load_average()
    alone = backbone_rate(extractor, items, args.batch_size, channels_last=True)
    alone_contiguous = backbone_rate(extractor, items, args.batch_size, channels_last=False)
    print(f"backbone forward alone (channels-last): {alone:.2f} images/s; contiguous: {alone_contiguous:.2f}")
    backbone_load = loads("backbone", before)
    peak = peak_rss_mb()
    print(f"ratio stage / backbone: {stage / alone:.3f} (target >= 0.8); peak RSS {peak['peak_rss_mb']:.0f} MB "
          f"(main {peak['peak_rss_main_mb']:.0f} + worker {peak['peak_rss_worker_mb']:.0f})")
    return {
        "backbone": args.backbone, "image_size": args.image_size, "device": str(extractor.device),
        "images": counts["written"], "stage_images_per_s": round(stage, 2),
        "backbone_images_per_s": round(alone, 2), "backbone_contiguous_images_per_s": round(alone_contiguous, 2),
        "ratio": round(stage / alone, 3), **peak, "stage_load": stage_load,
        "backbone_load": backbone_load,
    }


def save_random_detector(path: Path, seed: int = 0, settings: dict | None = None) -> Path:
    """A checkpoint of the bottom-up detector with random weights (no download): at the released size, or with the
    `settings` given changed (a smaller detector for a dry run)."""
    torch.manual_seed(seed)
    model = BottomUpAttention(**(settings or {}))
    save_checkpoint(path, "bottom-up", model.config, model.state_dict(), schema=schema_version("bottom-up"))
    return path


class Parts:
    """Wall seconds of each part of the bottom-up detector's forward pass, summed over calls: module hooks mark
    where each part begins (the resize before the backbone, the backbone to res4, the RPN's convolutions, the
    proposals and RoI pooling, the res5 head with its mean over the RoI cells, the class and attribute predictor,
    then the class-wise NMS and choice of boxes until the forward returns)."""

    def __init__(self, model: BottomUpAttention, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self.current: str | None = None
        self.since = 0.0
        marks = [(model, "resize and pad", False), (model.backbone, "backbone to res4", False),
                 (model.rpn, "rpn convolutions", False), (model.rpn, "proposals and roi pooling", True),
                 (model.res5[0], "res5 head", False), (model.predictor, "predictor", False),
                 (model.predictor, "class-wise nms and selection", True), (model, None, True)]
        self.handles = [module.register_forward_hook(self.mark(name)) if after
                        else module.register_forward_pre_hook(self.mark(name)) for module, name, after in marks]

    def mark(self, name: str | None) -> Callable[..., None]:
        """A hook that ends the part under way and starts `name` (None: the forward has returned)."""
        def hook(*_: object) -> None:
            now = self.clock()
            if self.current is not None:
                self.seconds[self.current] = self.seconds.get(self.current, 0.0) + now - self.since
            self.current, self.since = name, now
        return hook

    def remove(self) -> None:
        """Take the hooks off the model."""
        for handle in self.handles:
            handle.remove()


def detector_forward(extractor: BottomUpExtractor, items: list, batch_size: int) -> tuple[float, dict[str, float]]:
    """Seconds of the detector's forward passes alone, called as the stage calls them, on the stage's batches
    decoded beforehand one batch at a time (decoding is not timed), and the seconds of each part (`Parts`)."""
    def clock() -> float:
        if extractor.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    dataset = extractor.dataset(items)
    parts = Parts(extractor.model, clock)
    total = 0.0
    with torch.inference_mode():
        for first in range(0, len(items), batch_size):
            images = [dataset[i]["image"].to(extractor.device) for i in range(first, min(first + batch_size,
                                                                                          len(items)))]
            start = clock()
            with autocast(extractor.device, extractor.run.precision):
                extractor.model(images, num_regions=extractor.num_regions, min_regions=extractor.min_regions,
                                max_regions=extractor.max_regions, score_threshold=extractor.score_threshold)
            total += clock() - start
    parts.remove()
    return total, parts.seconds


def bottom_up(args: argparse.Namespace, tmp: Path, detector: Path | None = None) -> dict:
    """`extract-regions --regions bottom-up` (10 to 100 boxes) against the detector's forward passes alone, in
    `args.precision`, with the checkpoint `detector` (by default a random one at the released size); the stage's
    output is `tmp`/feats.h5."""
    folder = tmp / "images"
    folder.mkdir()
    make_images(folder, args.images, size=RELEASED_SIZE)
    items = list_inputs([folder])
    run = RunOptions(batch_size=args.batch_size, workers=args.workers, device=args.device, precision=args.precision)
    detector = detector or save_random_detector(tmp / "detector.pt")
    extractor = BottomUpExtractor(run, str(detector), num_regions=None, min_regions=10, max_regions=100)
    if args.warmup:
        detector_forward(extractor, items[:args.warmup], args.batch_size)
    before = load_average()
    start = time.perf_counter()
    counts = extract(extractor, items, items, str(tmp / "feats.h5"))
    stage = time.perf_counter() - start
    print(f"stage (decode in {args.workers} workers + detector + write): {stage:.2f} s, "
          f"{counts['written'] / stage:.3f} images/s", flush=True)
    stage_load = loads("stage", before)
    with FeaturesReader(tmp / "feats.h5") as reader:
        boxes = reader.read(reader.ids, ["num_regions"])["num_regions"]
    print(f"boxes an image: {boxes.mean():.1f} on average ({boxes.min()} to {boxes.max()})", flush=True)
    before = load_average()
    forward, parts = detector_forward(extractor, items, args.batch_size)
    print(f"detector forward alone: {forward:.2f} s, {len(items) / forward:.3f} images/s", flush=True)
    forward_load = loads("forward", before)
    shares = {name: round(seconds / forward, 4) for name, seconds in parts.items()}
    for name, seconds in parts.items():
        print(f"  {name:32s} {seconds:8.2f} s  {100 * seconds / forward:5.1f}% of the forward")
    overhead = stage / forward - 1
    peak = peak_rss_mb()
    print(f"overhead stage / forward - 1: {overhead:.3f} (target < {OVERHEAD_TARGET}); res5 head "
          f"{100 * shares['res5 head']:.1f}% of the forward; peak RSS {peak['peak_rss_mb']:.0f} MB (main "
          f"{peak['peak_rss_main_mb']:.0f} + worker {peak['peak_rss_worker_mb']:.0f})")
    return {
        "device": str(extractor.device), "precision": args.precision, "images": counts["written"],
        "image_size": list(RELEASED_SIZE),
        "stage_s": round(stage, 3), "stage_images_per_s": round(counts["written"] / stage, 4),
        "forward_s": round(forward, 3), "forward_images_per_s": round(len(items) / forward, 4),
        "boxes_per_image": round(float(boxes.mean()), 2), "overhead": round(overhead, 4),
        "res5_share": shares["res5 head"], "part_shares": shares,
        **peak, "stage_load": stage_load, "forward_load": forward_load,
    }


def thread_counts(text: str) -> list[int]:
    """`--threads 1,2` -> [1, 2]."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give thread counts >= 1, comma-separated (e.g. 1,2)")
    return counts


def each_thread_count(args: argparse.Namespace, counts: list[int]) -> list[dict]:
    """Run this benchmark once per thread count, each in a fresh process (its own peak memory), echoing its
    lines; the JSON object each printed last."""
    results = []
    for count in counts:
        argv = [sys.executable, __file__, "--threads", str(count)]
        for key, value in vars(args).items():
            if key != "threads":
                argv += [f"--{key.replace('_', '-')}", str(value)]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as child:
            lines = []
            for line in child.stdout:
                print(line, end="", flush=True)
                lines.append(line)
        if child.returncode != 0 or not lines:
            raise SystemExit(f"the run with --threads {count} failed (exit status {child.returncode})")
        results.append(json.loads(lines[-1]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", choices=sorted(DEFAULT_IMAGES), default="grid")
    parser.add_argument("--images", type=int, help="Photos to extract [200 for grid, 20 for bottom-up].")
    parser.add_argument("--backbone", default="resnet50", help="grid only.")
    parser.add_argument("--image-size", type=int, default=224, help="grid only.")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS, help="bottom-up only.")
    parser.add_argument("--warmup", type=int, default=1,
                        help="bottom-up: images through the detector before the measurements (not timed).")
    parser.add_argument("--threads", type=thread_counts, default=[],
                        help="Torch thread counts, comma-separated: one fresh process each [torch's default].")
    args = parser.parse_args()
    args.images = args.images or DEFAULT_IMAGES[args.regions]
    counts = args.threads
    if len(counts) > 1:
        runs = each_thread_count(args, counts)
        print(json.dumps({"benchmark": "extract", "regions": args.regions, "runs": runs}))
        return
    if counts:
        torch.set_num_threads(counts[0])
    configure(quiet=True)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} threads; torch threads {torch.get_num_threads()}; regions "
          f"{args.regions}, {args.images} images, batch {args.batch_size}, {args.workers} decode workers", flush=True)
    with tempfile.TemporaryDirectory(prefix="vltools-bench-") as tmp:
        measured = (grid if args.regions == "grid" else bottom_up)(args, Path(tmp))
    print(json.dumps({"benchmark": "extract", "regions": args.regions, "cpu": cpu_model(),
                      "torch_threads": torch.get_num_threads(), "batch_size": args.batch_size,
                      "workers": args.workers, **measured}))


if __name__ == "__main__":
    main()
