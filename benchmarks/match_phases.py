"""Start-up and I/O of `vltools match` at Flickr30K's test size on the CPU (issue 50): the whole SGRAF process's
phases (phases.py, the same table gpu.py prints on a GPU) against the target of at most 3 s outside the model on
2 cores.

Inputs (written once into --folder, reused when there): a SCAN precomp split, `test_ims.npy` of --images x 36 x
2048 random regions (standard normal, seeded) and `test_caps.txt` of 5 captions an image (Flickr30K's 5,000 test
captions from ../shared/data, or where that folder is absent the 250 of tests/data; cycled beyond their count),
converted by the real `vltools convert precomp` into a features HDF5 and a captions JSONL; random SGR and SAF
checkpoints at the released sizes with the SGRAF Flickr30K vocabulary (match_sgraf.save_release_model). Two runs of
`vltools match FEATS CAPS --model sgr.pt --model saf.pt --sims S.h5 -o R.jsonl --device cpu`, each a fresh process
with --threads torch threads:

- [A] every caption (1,000 x 5,000 by default) with the networks stood in for after the real checkpoint load
  (phases.py --stand-in: random scores at once): every phase but the model, at full size;
- [B] every --model-every-th caption (and the images they name: 500 x 500 by default) with the real SGR and SAF:
  the model's time, projected to [A]'s pairs (an estimate: the images are encoded once either way).

Each run's inputs are read once just before it (a warm page cache). Printed: the CPU, its threads and the load
average before and after each run; each phase's seconds in both runs; the total outside the model of [A] against
the target; on the last line, one JSON object with every figure.

    python benchmarks/match_phases.py [--images 1000] [--model-every 10] [--threads 2] [--folder DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from machine import cpu_model, load_average
from match_sgraf import CAPTIONS, ROOT, save_release_model
from phases import MODEL, Measured, measure, print_phases

TARGET_S = 3.0          # outside the model, on 2 cores
PER_IMAGE = 5           # captions an image, as in Flickr30K
REGIONS = (36, 2048)
WRITE_BLOCK = 100       # images generated at a time
FLICKR_TEST = ROOT.parent / "shared/data/precomp_caps/f30k_precomp/test_caps.txt"   # SCAN's Flickr30K test captions


def caption_source() -> Path:
    """Flickr30K's test captions in SCAN's file, else the sample of them in tests/data."""
    return FLICKR_TEST if FLICKR_TEST.is_file() else CAPTIONS


def write_precomp(folder: Path, n_images: int, seed: int = 0) -> None:
    """`test_ims.npy` (n_images x 36 x 2048 float32, standard normal) and `test_caps.txt` (5 real captions an
    image, cycled) in `folder`, the SCAN layout."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images = np.lib.format.open_memmap(folder / "test_ims.npy", mode="w+", dtype=np.float32,
                                       shape=(n_images, *REGIONS))
    for start in range(0, n_images, WRITE_BLOCK):
        stop = min(start + WRITE_BLOCK, n_images)
        images[start:stop] = rng.standard_normal((stop - start, *REGIONS), dtype=np.float32)
    images.flush()
    del images
    lines = [line for line in caption_source().read_text(encoding="utf-8").splitlines() if line.strip()]
    (folder / "test_caps.txt").write_text("".join(f"{lines[i % len(lines)]}\n" for i in range(n_images * PER_IMAGE)),
                                          encoding="utf-8")


def inputs(folder: Path, n_images: int, every: int) -> dict[str, Path]:
    """The features, both captions files and both checkpoints in `folder`, made where missing."""
    paths = {name: folder / name for name in ("feats.h5", "caps.jsonl", "caps_model.jsonl", "sgr.pt", "saf.pt")}
    if not paths["feats.h5"].exists() or not paths["caps.jsonl"].exists():
        write_precomp(folder / "precomp", n_images)
        subprocess.run([sys.executable, "-m", "vltools", "--quiet", "convert", "precomp", str(folder / "precomp"),
                        "--split", "test", "--features", str(paths["feats.h5"]), "--captions",
                        str(paths["caps.jsonl"])], check=True)
        (folder / "precomp" / "test_ims.npy").unlink()
    lines = paths["caps.jsonl"].read_text(encoding="utf-8").splitlines(keepends=True)
    paths["caps_model.jsonl"].write_text("".join(lines[::every]), encoding="utf-8")
    for name in ("sgr", "saf"):
        if not paths[f"{name}.pt"].exists():
            save_release_model(paths[f"{name}.pt"], name)
    return paths


def warm(paths: list[Path]) -> None:
    """Read each file once, so that a run finds its inputs in the page cache (this machine evicts idle pages within
    minutes, and reading 440 MB from the disk would be timed as loading)."""
    for path in paths:
        with path.open("rb") as stream:
            while stream.read(1 << 24):
                pass


def match_argv(paths: dict[str, Path], captions: str, folder: Path, name: str) -> list[str]:
    """The arguments of the `match` command over `captions`, writing into `folder`."""
    return [str(paths["feats.h5"]), str(paths[captions]), "--model", str(paths["sgr.pt"]), "--model",
            str(paths["saf.pt"]), "--sims", str(folder / f"{name}_sims.h5"), "-o", str(folder / f"{name}.jsonl"),
            "--device", "cpu"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1000, help="images (5 captions each) [1000: Flickr30K test]")
    parser.add_argument("--model-every", type=int, default=10,
                        help="run [B] (the real model) on every N-th caption and the images they name; 0: [A] "
                             "alone")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (OMP_NUM_THREADS)")
    parser.add_argument("--folder", help="where the inputs are kept and reused [a temporary folder]")
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    print(f"CPU: {cpu_model()}, {os.cpu_count()} threads; torch threads {args.threads}; load average "
          f"{load_average()}; captions from {caption_source()}", flush=True)
    n_captions = args.images * PER_IMAGE
    every = args.model_every or n_captions      # 0: [B] is not run (its inputs stay one caption)
    model_captions = len(range(0, n_captions, every))
    model_images = len({i // PER_IMAGE for i in range(0, n_captions, every)})
    sizes = {"A": (args.images, n_captions), "B": (model_images, model_captions)}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.folder or scratch)
        paths = inputs(folder, args.images, every)
        runs: dict[str, Measured] = {}
        labels, loads = {}, {}
        for key, captions, stand_in, what in (
                ("A", "caps.jsonl", True, "networks stood in for (random scores): every other phase"),
                ("B", "caps_model.jsonl", False, "real SGR + SAF: the model")):
            if key == "B" and not args.model_every:
                continue
            warm([paths["feats.h5"], paths[captions], paths["sgr.pt"], paths["saf.pt"]])
            before = load_average()
            runs[key] = measure(match_argv(paths, captions, folder, key), env, stand_in)
            loads[key] = (before, load_average())
            labels[key] = (f"{sizes[key][0]} images x {sizes[key][1]} captions, {what} (load average before "
                           f"{before}, after {loads[key][1]})")
    print(f"where `vltools match` spends its time (release-size SGR + SAF, SCAN-layout features, {args.threads} "
          f"threads):", flush=True)
    print_phases({labels[key]: run for key, run in runs.items()})
    full = runs["A"]
    pairs = sizes["A"][0] * sizes["A"][1] / (sizes["B"][0] * sizes["B"][1])
    projected = runs["B"].phases[MODEL] * pairs if "B" in runs else None
    met = "met" if full.outside_model <= TARGET_S else "not met"
    model = "; [B] not run" if projected is None else \
        (f"; the model {runs['B'].phases[MODEL]:.1f} s at {sizes['B'][0]} x {sizes['B'][1]}, about {projected:.0f} s "
         f"projected to {sizes['A'][0]} x {sizes['A'][1]} by the pairs")
    print(f"everything but the model at {sizes['A'][0]} x {sizes['A'][1]}: {full.outside_model:.2f} s (target at "
          f"most {TARGET_S:.0f} s on 2 cores: {met}){model}", flush=True)
    print(json.dumps({"cpu": cpu_model(), "threads": os.cpu_count(), "torch_threads": args.threads, "sizes": sizes,
                      "loads": loads, "phases": {key: run.phases for key, run in runs.items()},
                      "wall_s": {key: run.wall_s for key, run in runs.items()},
                      "outside_model_s": full.outside_model, "target_s": TARGET_S,
                      "model_projected_s": projected}))


if __name__ == "__main__":
    main()
