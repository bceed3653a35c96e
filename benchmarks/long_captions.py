"""Peak memory of `vltools match` and `vltools train` (SGR, official sizes) with one very long caption.

SGR's memory grows with the square of the longest caption (its graph reasons over the words), so one
5,000-word caption used to make `match` try to allocate 12.5 GB. vltools cuts captions to
MAX_CAPTION_TOKENS words when encoding them (vltools.text.vocab); this script measures the peak resident
memory of each run in a fresh process: without the long caption (baseline), with one 300-word and one
5,000-word caption (both cut to 100 words), and, with `--uncapped`, with the 300-word caption uncut
(VLTOOLS_MAX_CAPTION_TOKENS=0) to show what the limit saves.

Inputs: random SGR weights (embed 1024, sim 256, 3 steps, K=36 regions of 2048-d random features), the
real Flickr30K test captions of tests/data with the SGRAF Flickr30K vocabulary.

Run: `.venv/bin/python benchmarks/long_captions.py [--images 50] [--uncapped]` (the last line is one JSON
object).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from machine import cpu_model, measured_run
from match_sgraf import CAPTIONS, save_release_model

from vltools.io.features import FeaturesWriter
from vltools.io.records import write_records
from vltools.text.vocab import MAX_CAPTION_TOKENS, MAX_TOKENS_VARIABLE


def build(folder: Path, n_images: int) -> dict[str, Path]:
    """Features, an SGR checkpoint and caption files (5 per image; with a 300- or 5000-word caption added)."""
    save_release_model(folder / "sgr.pt", "sgr")
    ids = [f"img{i}" for i in range(n_images)]
    rng = np.random.default_rng(0)
    with FeaturesWriter(folder / "feats.h5", {"backbone": "random"}, dtype="float32") as writer:
        writer.add(ids, regions=rng.normal(size=(n_images, 36, 2048)).astype(np.float32))
    lines = CAPTIONS.read_text(encoding="utf-8").splitlines()
    records = [{"image_id": ids[i // 5], "caption": lines[i % len(lines)], "split": "test"}
               for i in range(5 * n_images)]
    files = {"features": folder / "feats.h5", "model": folder / "sgr.pt"}
    words = " ".join(lines).split()
    for name, count in (("baseline", 0), ("300 words", 300), ("5000 words", 5000)):
        extra = [{"image_id": ids[0], "caption": " ".join(words[i % len(words)] for i in range(count)),
                  "split": "test", "caption_id": "long"}] if count else []
        files[name] = folder / f"{name.replace(' ', '_')}.jsonl"
        write_records(files[name], records + extra)
        train = [{**r, "split": "val" if i % 5 == 0 else "train"} for i, r in enumerate(records)]
        files[f"train {name}"] = folder / f"train_{name.replace(' ', '_')}.jsonl"
        write_records(files[f"train {name}"], train + [{**r, "split": "train"} for r in extra])
    return files


def peak_mb(argv: list[str], env: dict[str, str]) -> tuple[int, float, float]:
    """(peak RSS in MB, wall seconds, user+sys CPU seconds) of `vltools ARGV` in a fresh process."""
    run = measured_run([sys.executable, "-m", "vltools", "-q", *argv], env)
    return run.peak_rss_mb, run.wall_s, run.cpu_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--uncapped", action="store_true", help="Also run the 300-word caption uncut.")
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    env.pop(MAX_TOKENS_VARIABLE, None)
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = build(Path(tmp), args.images)
        cases = [(name, name, env) for name in ("baseline", "300 words", "5000 words")]
        if args.uncapped:
            cases.append(("300 words uncut", "300 words", {**env, MAX_TOKENS_VARIABLE: "0"}))
        for label, name, case_env in cases:
            match = ["match", str(files["features"]), str(files[name]), "--model", str(files["model"]),
                     "-o", f"{tmp}/{label.replace(' ', '_')}.rankings.jsonl"]
            train = ["train", "--model", "sgr", str(files["features"]), str(files[f"train {name}"]), "-o",
                     f"{tmp}/{label.replace(' ', '_')}.pt", "--epochs", "1", "--batch-size", "32", "--device", "cpu",
                     "--set", "train.val_every=0"]
            for stage, argv in (("match", match), ("train", train)):
                rss, wall, cpu = peak_mb(argv, case_env)
                figures[f"{stage} {label}"] = {"peak_rss_mb": rss, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
                print(f"{stage:5s} {label:16s} peak RSS {rss:6d} MB  wall {wall:6.1f} s  user+sys {cpu:6.1f} s",
                      flush=True)
    for stage in ("match", "train"):
        base = figures[f"{stage} baseline"]["peak_rss_mb"]
        for label in ("300 words", "5000 words", "300 words uncut"):
            if f"{stage} {label}" in figures:
                figures[f"{stage} {label}"]["ratio_to_baseline"] = round(
                    figures[f"{stage} {label}"]["peak_rss_mb"] / base, 3)
    print(json.dumps({"cpu": cpu_model(), "threads": args.threads,
                      "images": args.images, "captions": 5 * args.images, "max_caption_tokens": MAX_CAPTION_TOKENS,
                      "figures": figures}))


if __name__ == "__main__":
    main()
