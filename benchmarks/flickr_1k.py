"""Flickr30K 1K x 5K end to end: `vltools match --model` (release-size SGR, SAF and the SGRAF ensemble) against the
released per-caption evaluation loop, each a fresh process, with the similarity matrices compared (issue 32, item 1).

Inputs, written to a temporary folder: a features file in vltools' format of --images images x 36 x 2048 random
float32 regions (standard normal, seeded); a captions JSONL of --captions-per-image captions per image (split test),
the real Flickr30K test captions of tests/data cycled in order, so that their lengths are real; random-initialised
SGR and SAF checkpoints at the released sizes with the SGRAF Flickr30K vocabulary (match_sgraf.save_release_model).

For each of --models (sgr, saf, sgraf: both, ranked by their mean), two fresh processes on the same files with the
same torch thread count (OMP_NUM_THREADS, and torch.set_num_threads in the released process):

- vltools: `vltools match FEATS CAPS --model ... --sims SIMS.h5 -o RANKINGS.jsonl --device cpu`, all of it: start-up,
  loading, tokenising, encoding, every pair, the top-10 rankings and the matrix written;
- released: this script's `released` mode: the same checkpoints loaded into the same modules, the captions tokenised
  by their vocabulary, every image encoded at once and the captions in batches of 128, then the released
  evaluation's `shard_attn_scores` loop (100 x 100 shards, each a Python loop over its captions: `released_match` of
  match_sgraf.py), the matrix saved as .npy (sgraf: each model's matrix, then their mean, as the released evaluation
  averages SGR's and SAF's).

Printed per model: both processes' wall and CPU seconds and peak RSS, the released / vltools wall ratio (target: at
least 2) and the largest absolute difference of the two matrices (target: at most 1e-5), with the load average
before and after each process.

--every N keeps every N-th caption (in file order, image by image), for a run that cannot finish in the time at hand;
the output says which fraction was measured. `match` scores the images its captions name, so beyond N =
--captions-per-image the images thin out too (every 10th of 5 per image: every other image, 500 x 500 of 1000 x
5000), and the pairs measured are printed.

Run: `.venv/bin/python benchmarks/flickr_1k.py [--images 1000] [--captions-per-image 5] [--every 1] [--threads 2]
[--models sgr,saf,sgraf] | tee benchmarks/results/flickr-1k.txt` (the last line is one JSON object).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from machine import cpu_model, load_average, measured_run
from match_sgraf import CAPTIONS, released_match, save_release_model

from vltools.data.captions import read_split
from vltools.infer.loader import load_model
from vltools.io.features import FeaturesReader, FeaturesWriter
from vltools.io.records import write_records
from vltools.io.sims import read_sims
from vltools.text.captions import pad_tokens

MODELS = {"sgr": ("sgr",), "saf": ("saf",), "sgraf": ("sgr", "saf")}
WRITE_BLOCK = 100     # images generated and written at a time


def write_features(path: Path, n_images: int, dtype: str = "float32", seed: int = 0) -> list[str]:
    """n_images x 36 x 2048 random regions (standard normal, seeded) in the features format; the image ids."""
    ids = [f"img{i}" for i in range(n_images)]
    rng = np.random.default_rng(seed)
    with FeaturesWriter(path, {"backbone": "random"}, dtype=dtype) as writer:
        for start in range(0, n_images, WRITE_BLOCK):
            block = ids[start:start + WRITE_BLOCK]
            writer.add(block, regions=rng.standard_normal((len(block), 36, 2048), dtype=np.float32))
    return ids


def write_captions(path: Path, ids: Sequence[str], per_image: int, every: int = 1,
                   splits: Sequence[str] | None = None) -> int:
    """Captions JSONL: `per_image` real Flickr30K test captions (tests/data's, cycled) for each image, image by
    image, of which every `every`-th is kept, in split "test" or each image's of `splits`; returns how many."""
    lines = [line for line in CAPTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    splits = splits or ["test"] * len(ids)
    return write_records(path, ({"image_id": ids[i // per_image], "caption": lines[i % len(lines)],
                                 "split": splits[i // per_image],
                                 "caption_id": f"{ids[i // per_image]}#{i % per_image}"}
                                for i in range(0, len(ids) * per_image, every)))


def released_main(argv: Sequence[str]) -> None:
    """`flickr_1k.py released OUT.npy FEATS CAPS CKPT...`: the released evaluation's structure over the same inputs."""
    parser = argparse.ArgumentParser(prog="flickr_1k.py released")
    parser.add_argument("output")
    parser.add_argument("features")
    parser.add_argument("captions")
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    loaded = [load_model(path) for path in args.checkpoints]
    chosen = read_split(args.captions, None)
    with FeaturesReader(args.features) as reader:
        regions = torch.from_numpy(reader.read(chosen.image_ids, ["regions"])["regions"]).float().to(args.device)
    total = None
    for item in loaded:
        tokens, lengths = pad_tokens(item.tokenize(chosen.captions))
        sims = released_match(item.model.to(args.device), regions, tokens.to(args.device), lengths)[0]
        total = sims if total is None else total + sims
    np.save(args.output, (total / len(loaded)).numpy())


def compare(name: str, folder: Path, features: Path, captions: Path, threads: int,
            device: str = "cpu") -> dict[str, object]:
    """One model (or the ensemble) on `device`: the released process, then vltools', then their matrices' largest
    difference."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    checkpoints = [str(folder / f"{member}.pt") for member in MODELS[name]]
    row: dict[str, object] = {}
    released_npy, sims_h5 = folder / f"{name}_released.npy", folder / f"{name}_sims.h5"
    runs = {
        "released": [sys.executable, __file__, "released", str(released_npy), str(features), str(captions),
                     *checkpoints, "--threads", str(threads), "--device", device],
        "vltools": [sys.executable, "-m", "vltools", "--quiet", "match", str(features), str(captions),
                    *[part for path in checkpoints for part in ("--model", path)], "--sims", str(sims_h5),
                    "-o", str(folder / f"{name}_rankings.jsonl"), "--device", device],
    }
    for side, argv in runs.items():
        before = load_average()
        run = measured_run(argv, env)
        after = load_average()
        row[side] = {"wall_s": run.wall_s, "cpu_s": run.cpu_s, "peak_rss_mb": run.peak_rss_mb,
                     "load_before": before, "load_after": after}
        print(f"{name} {side:8s}: {run.wall_s:8.1f} s wall, {run.cpu_s:8.1f} s CPU, peak RSS {run.peak_rss_mb} MB "
              f"(load average before {before}, after {after})", flush=True)
    ours, reference = read_sims(sims_h5).sims, np.load(released_npy)
    row["speedup_wall"] = round(row["released"]["wall_s"] / row["vltools"]["wall_s"], 2)
    row["max_abs_diff"] = float(np.abs(ours - reference).max())
    print(f"{name}: released / vltools = {row['speedup_wall']}x (target at least 2x), max abs diff "
          f"{row['max_abs_diff']:.2e} (target at most 1e-5)", flush=True)
    return row


def main() -> None:
    if sys.argv[1:2] == ["released"]:
        released_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--captions-per-image", type=int, default=5)
    parser.add_argument("--every", type=int, default=1, help="keep every N-th caption (a stated fraction)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every process")
    parser.add_argument("--models", default="sgr,saf,sgraf", help="comma-separated, of sgr, saf, sgraf")
    parser.add_argument("--folder", help="where the inputs are written [a temporary folder]")
    args = parser.parse_args()
    names = args.models.split(",")
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; choose among {', '.join(MODELS)}")
    all_captions = args.images * args.captions_per_image
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; torch threads {args.threads} (OMP_NUM_THREADS); load average "
          f"{load_average()}", flush=True)
    report: dict[str, object] = {"cpu": cpu_model(), "threads": args.threads, "torch": torch.__version__,
                                 "images": args.images, "captions": all_captions, "every": args.every}
    with tempfile.TemporaryDirectory(dir=args.folder) as name:
        folder = Path(name)
        ids = write_features(folder / "feats.h5", args.images)
        captions = folder / "captions.jsonl"
        measured = write_captions(captions, ids, args.captions_per_image, args.every)
        images = len(read_split(captions, None).image_ids)
        for member in ("sgr", "saf"):
            save_release_model(folder / f"{member}.pt", member)
        fraction = images * measured / (args.images * all_captions)
        report.update(measured_images=images, measured_captions=measured, pair_fraction=round(fraction, 6))
        print(f"{args.images} images x {all_captions} captions; "
              + (f"fraction 1/{args.every} of captions measured: " if args.every > 1 else "measured: ")
              + f"{images} images x {measured} captions ({100 * fraction:.1f}% of the pairs)", flush=True)
        for model in names:
            report[model] = compare(model, folder, folder / "feats.h5", captions, args.threads)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
