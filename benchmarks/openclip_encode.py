"""Benchmark of `encode --model openclip:ViT-B-32` on images, against open_clip's own loop, in the same run.

The same ViT-B-32 (release architecture, seeded random weights: the time is the pretrained model's) encodes the same
images, the project's photos (tests/data/photos) copied N times into a folder, with the same batch size and threads:
  - vltools: the encode stage itself (`vltools.stages.encode.encode` with the loaded model, writing the embeddings
    file: listing, decoding, open_clip's preprocess, the model, the resumable checkpoint and the HDF5 output);
  - open_clip: `model.encode_image(batch, normalize=True)` over a torch DataLoader of `preprocess(Image.open(path))`.
Ratio = vltools images/s / open_clip images/s (target: at least 1x), on wall time and on this process's CPU time
(time.process_time: the decoding runs in this process too, so other load on a shared machine counts less); the
largest difference between the two embeddings is printed too. Best of `--repeats` runs each, alternating; the CPU's
model, the torch threads and the load average before and after each figure are printed beside it. Prints readable
lines, then one JSON object on the last line.

    python benchmarks/openclip_encode.py [--images 48] [--batch 16] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import open_clip
import torch
from machine import cpu_model, load_average
from PIL import Image

from vltools.infer.loader import load_model
from vltools.stages.encode import encode

PHOTOS = Path(__file__).resolve().parent.parent / "tests/data/photos"


class Photos(torch.utils.data.Dataset):
    """open_clip's usual input: each file opened with PIL and passed through its preprocess."""

    def __init__(self, paths: list[Path], preprocess) -> None:
        self.paths, self.preprocess = paths, preprocess

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.preprocess(Image.open(self.paths[index]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model("openclip:ViT-B-32:random", "encodable")
    model, preprocess = loaded.model, loaded.clip.preprocess
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "images"
        folder.mkdir()
        sources = sorted(PHOTOS.iterdir())
        for k in range(args.images):
            source = sources[k % len(sources)]
            shutil.copy(source, folder / f"{k:04d}{source.suffix}")
        paths = sorted(folder.iterdir())
        output = Path(scratch) / "emb.h5"

        def vltools_encode() -> np.ndarray:
            output.unlink(missing_ok=True)
            encode(folder, loaded, output, batch_size=args.batch, device="cpu")
            with h5py.File(output) as handle:
                return handle["emb"][()]

        def open_clip_loop() -> np.ndarray:
            loader = torch.utils.data.DataLoader(Photos(paths, preprocess), batch_size=args.batch)
            with torch.inference_mode():
                return torch.cat([model.encode_image(batch, normalize=True) for batch in loader]).numpy()

        runs: dict[str, list[float]] = {"vltools": [], "open_clip": []}
        cpu: dict[str, list[float]] = {"vltools": [], "open_clip": []}
        loads: dict[str, list[tuple[float, ...]]] = {"vltools": [], "open_clip": []}
        found = {"vltools": vltools_encode(), "open_clip": open_clip_loop()}    # warm-up, and the results compared
        for _ in range(args.repeats):
            for name, function in (("open_clip", open_clip_loop), ("vltools", vltools_encode)):
                before = load_average()
                start, start_cpu = time.perf_counter(), time.process_time()
                function()
                runs[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
                loads[name].append((before[0], load_average()[0]))
    rates = {name: args.images / min(times) for name, times in runs.items()}
    cpu_rates = {name: args.images / min(times) for name, times in cpu.items()}
    difference = float(np.abs(found["vltools"] - found["open_clip"]).max())
    where = f"{cpu_model()}, {torch.get_num_threads()} torch threads, open_clip {open_clip.__version__}"
    print(f"machine: {where}")
    for name in ("open_clip", "vltools"):
        best = int(np.argmin(runs[name]))
        print(f"{name:9s}: {rates[name]:6.2f} images/s (best of {args.repeats}: {min(runs[name]):.2f} s for "
              f"{args.images} images, batch {args.batch}; load average {loads[name][best][0]} before, "
              f"{loads[name][best][1]} after); {cpu_rates[name]:6.2f} images per CPU second (best "
              f"{min(cpu[name]):.2f} CPU s)")
    ratio = rates["vltools"] / rates["open_clip"]
    cpu_ratio = cpu_rates["vltools"] / cpu_rates["open_clip"]
    print(f"ratio vltools / open_clip: {ratio:.3f}x on wall time, {cpu_ratio:.3f}x on CPU time (target at least 1x); "
          f"largest embedding difference {difference:.1e}")
    print(json.dumps({"machine": where, "images": args.images, "batch": args.batch, "repeats": args.repeats,
                      "images_per_s": {name: round(rate, 3) for name, rate in rates.items()},
                      "seconds": {name: [round(t, 3) for t in times] for name, times in runs.items()},
                      "cpu_seconds": {name: [round(t, 3) for t in times] for name, times in cpu.items()},
                      "load_average": loads, "ratio": round(ratio, 3), "cpu_ratio": round(cpu_ratio, 3),
                      "max_difference": difference}))


if __name__ == "__main__":
    main()
