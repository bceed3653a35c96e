"""COCO 5K x 25K two-stage search: `vltools match --rerank K --first-stage vse.pt --model sgr.pt --model saf.pt`
measured whole, with its peak memory, and its recall against exhaustive SGRAF on a 1K x 5K test set (issue 32, item 2).

Speed, with random weights: a features file of --images images x 36 x 2048 random regions (float16, seeded), a
captions JSONL of --captions-per-image real Flickr30K test captions per image (tests/data's, cycled: real lengths),
release-size random SGR and SAF and a release-like VSE first stage (embed 1024, word 300), all with the SGRAF Flickr30K
vocabulary. For each K of --k, in a fresh process with --threads torch threads:

- --query-every 1: the whole `vltools match --rerank K ...` (start-up, loading, tokenising, the first stage: VSE
  encoding of every image and caption and its exact top-K both ways, then SGR + SAF on the K candidates of every query
  both ways, the rankings written): wall and CPU seconds, peak RSS;
- --query-every N: this script's `fraction` mode runs the same library calls as `match` (`candidates`, then
  `rerank_candidates`) with the whole first stage and the rerank of every N-th query of each direction at full gallery
  size, and times them apart; printed are the measured seconds and the **projected** whole: the process's wall time
  with each direction's measured rerank scaled to all its queries. The projection scales the encoding of candidates
  too, which the whole run does once per candidate (within --image-cache-mb): it errs high. The peak RSS is that of
  the fraction's process.

Quality (--quality; random weights make recall meaningless): a synthetic world (`vltools synth`, no near-duplicates)
of --quality-images test images, --quality-train-images training images and a tenth of that for validation, its
features as the demo extracts them (a random ResNet-18 over a 3 x 3 grid at 96 px), small SGR, SAF and VSE trained
on it (embed 128, word 64, sim 32; batch 16, --quality-epochs), then R@1/5/10 both ways of VSE alone, exhaustive
SGRAF (`match --model sgr.pt --model saf.pt`) and `--rerank K` for each K with the VSE first stage, on the test
split, from the top-10 rankings. Target: R@1 of the rerank within 0.5 points of exhaustive. Each step's wall time is
printed, so that the cost of a larger quality world can be estimated.

Every figure is printed with the load average before and after it; the last line is one JSON object of them all.

Run: `.venv/bin/python benchmarks/coco_two_stage.py [--images 5000] [--captions-per-image 5] [--k 100,256]
[--query-every 10] [--threads 2] [--no-speed] [--no-quality] [--quality-images 1000] [--quality-train-images 600]
[--quality-epochs 12] | tee benchmarks/results/coco-two-stage.txt`
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from flickr_1k import write_captions, write_features
from machine import cpu_model, load_average, measured_run
from match_sgraf import save_release_model

from vltools.data.blocks import CaptionBlocks, FeatureBlocks
from vltools.data.captions import read_split
from vltools.infer.loader import load_model, load_models
from vltools.infer.match import Search
from vltools.infer.rerank import FirstStage, candidates, rerank_candidates
from vltools.io.features import FeaturesReader
from vltools.io.records import read_records, write_records

# the demo's extractor (examples/demo/demo.sh): a random ResNet-18 over the 3 x 3 grid of its last stage at 96 px
EXTRACT = ["--regions", "grid", "--backbone", "resnet18", "--weights", "none", "--seed", "0", "--image-size", "96",
           "--workers", "0", "--batch-size", "32", "--dtype", "float32"]
# small models and the demo's schedule: the released sizes learn nothing in minutes on a CPU
SMALL = ["--batch-size", "16", "--lr", "2e-3", "--seed", "0", "--val-every", "0", "--set", "model.embed_size=128",
         "--set", "model.word_dim=64", "--set", "model.dropout=0.0", "--set", "task.max_violation=false"]
SMALL_SIM = ["--set", "model.sim_dim=32"]


def fraction_main(argv: Sequence[str]) -> None:
    """`coco_two_stage.py fraction FEATS CAPS VSE.pt CKPT... --k K --every N --threads T`: the first stage of
    `match --rerank K` whole and the rerank of every N-th query of each direction, through the library; prints one
    JSON line."""
    parser = argparse.ArgumentParser(prog="coco_two_stage.py fraction")
    parser.add_argument("features")
    parser.add_argument("captions")
    parser.add_argument("first_stage")
    parser.add_argument("models", nargs="+")
    parser.add_argument("--k", type=int, required=True)
    parser.add_argument("--every", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    options, cpu = Search(), torch.device("cpu")
    first = load_model(args.first_stage)
    loaded = load_models(args.models)
    chosen = read_split(args.captions, None)
    seconds: dict[str, float] = {}
    with FeaturesReader(args.features) as reader:
        images = FeatureBlocks(reader, chosen.image_ids, options.block_images)
        captions = CaptionBlocks(loaded[0].tokenize(chosen.captions), options.block_captions)
        plan = FirstStage(first.model, CaptionBlocks(first.tokenize(chosen.captions), options.block_captions))
        start = time.perf_counter()
        proposals = candidates(plan, images, args.k, cpu)
        seconds["first_stage_s"] = time.perf_counter() - start
        queries = {"i2t": np.arange(0, len(chosen.image_ids), args.every),
                   "t2i": np.arange(0, len(chosen.captions), args.every)}
        none = np.zeros(0, dtype=np.int64)
        for way in ("i2t", "t2i"):
            start = time.perf_counter()
            rerank_candidates([item.model for item in loaded], images, captions, proposals, options.top_k, cpu,
                              cache_mb=options.image_cache_mb,
                              image_queries=queries["i2t"] if way == "i2t" else none,
                              caption_queries=queries["t2i"] if way == "t2i" else none)
            seconds[f"rerank_{way}_s"] = time.perf_counter() - start
    print(json.dumps({**{k: round(v, 2) for k, v in seconds.items()}, "queries_i2t": len(queries["i2t"]),
                      "all_i2t": len(chosen.image_ids), "queries_t2i": len(queries["t2i"]),
                      "all_t2i": len(chosen.captions)}))


def speed(folder: Path, args: argparse.Namespace) -> dict[str, object]:
    """The two-stage search on random release-size models, for each K: whole, or every N-th query and projected."""
    features, captions = folder / "feats.h5", folder / "captions.jsonl"
    start = time.perf_counter()
    ids = write_features(features, args.images, dtype="float16")
    count = write_captions(captions, ids, args.captions_per_image)
    checkpoints = [str(save_release_model(folder / f"{name}.pt", name)) for name in ("vse", "sgr", "saf")]
    print(f"speed: {args.images} images x {count} captions (random 36 x 2048 float16 regions, real caption lengths), "
          f"release-size random VSE, SGR, SAF written in {time.perf_counter() - start:.1f} s", flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    rows: dict[str, object] = {}
    for k in args.k:
        if args.query_every == 1:
            argv = [sys.executable, "-m", "vltools", "--quiet", "match", str(features), str(captions), "--rerank",
                    str(k), "--first-stage", checkpoints[0], "--model", checkpoints[1], "--model", checkpoints[2],
                    "-o", str(folder / f"rerank{k}.jsonl"), "--device", "cpu"]
        else:
            argv = [sys.executable, __file__, "fraction", str(features), str(captions), *checkpoints, "--k", str(k),
                    "--every", str(args.query_every), "--threads", str(args.threads)]
        before = load_average()
        run = measured_run(argv, env)
        row: dict[str, object] = {"wall_s": run.wall_s, "cpu_s": run.cpu_s, "peak_rss_mb": run.peak_rss_mb,
                                  "load_before": before, "load_after": load_average()}
        if args.query_every == 1:
            print(f"--rerank {k}, whole process: {run.wall_s:.1f} s wall, {run.cpu_s:.1f} s CPU, peak RSS "
                  f"{run.peak_rss_mb} MB (load average before {before}, after {row['load_after']})", flush=True)
        else:
            parts = json.loads(run.stdout.splitlines()[-1])
            measured = parts["rerank_i2t_s"] + parts["rerank_t2i_s"]
            scaled = (parts["rerank_i2t_s"] * parts["all_i2t"] / parts["queries_i2t"]
                      + parts["rerank_t2i_s"] * parts["all_t2i"] / parts["queries_t2i"])
            row.update(parts, projected_whole_s=round(run.wall_s - measured + scaled, 1))
            print(f"--rerank {k}, every {args.query_every}th query measured ({parts['queries_i2t']} of "
                  f"{parts['all_i2t']} image queries, {parts['queries_t2i']} of {parts['all_t2i']} caption queries): "
                  f"process {run.wall_s:.1f} s wall ({run.cpu_s:.1f} s CPU), of which first stage (whole) "
                  f"{parts['first_stage_s']:.1f} s, rerank i2t {parts['rerank_i2t_s']:.1f} s, t2i "
                  f"{parts['rerank_t2i_s']:.1f} s; peak RSS {run.peak_rss_mb} MB; PROJECTED whole run "
                  f"{row['projected_whole_s']:.0f} s (target under 3600 s) (load average before {before}, after "
                  f"{row['load_after']})", flush=True)
        rows[str(k)] = row
    return {"images": args.images, "captions": count, "query_every": args.query_every, "rerank": rows}


def timed_stage(label: str, argv: Sequence[str], env: dict[str, str], seconds: dict[str, float]) -> str:
    """`vltools ARGV` in a fresh process; its wall seconds under `label`; its standard output."""
    before = load_average()
    run = measured_run([sys.executable, "-m", "vltools", "--quiet", *argv], env)
    seconds[label] = run.wall_s
    print(f"quality: {label} {run.wall_s:.1f} s (load average before {before}, after {load_average()})", flush=True)
    return run.stdout


def quality_world(folder: Path, args: argparse.Namespace, env: dict[str, str], seconds: dict[str, float]) -> Path:
    """A synthetic world without near-duplicates and its captions re-split: the first --quality-images images test,
    the next tenth of --quality-train-images val, the rest train."""
    n_val = max(10, args.quality_train_images // 10)
    timed_stage("synth", ["synth", str(folder / "world"), "--images",
                          str(args.quality_images + n_val + args.quality_train_images), "--pairs", "0", "--aux-images",
                          "0", "--edit-fraction", "0", "--seed", "0"], env, seconds)
    order = {r["image_id"]: n for n, r in enumerate(read_records(folder / "world/images.jsonl", "images"))}
    limits = ((args.quality_images, "test"), (args.quality_images + n_val, "val"))
    records = [{**r, "split": next((name for limit, name in limits if order[r["image_id"]] < limit), "train")}
               for r in read_records(folder / "world/captions.jsonl", "captions")]
    captions = folder / "captions.jsonl"
    write_records(captions, records)
    return captions


def quality(folder: Path, args: argparse.Namespace) -> dict[str, object]:
    """R@1/5/10 both ways of VSE, exhaustive SGRAF and each --rerank K on the synthetic world's test split."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    seconds: dict[str, float] = {}
    captions = quality_world(folder, args, env, seconds)
    features = str(folder / "feats.h5")
    timed_stage("extract-regions", ["extract-regions", str(folder / "world/images.jsonl"), *EXTRACT, "-o", features],
                env, seconds)
    schedule = ["--epochs", str(args.quality_epochs), "--lr-update", str(max(1, args.quality_epochs * 3 // 4))]
    models = {name: str(folder / f"{name}.pt") for name in ("vse", "sgr", "saf")}
    for name, path in models.items():
        timed_stage(f"train {name}", ["train", "--model", name, *SMALL, *([] if name == "vse" else SMALL_SIM),
                                      *schedule, features, str(captions), "-o", path], env, seconds)
    test = [features, str(captions), "--split", "test", "--device", "cpu"]
    sgraf = ["--model", models["sgr"], "--model", models["saf"]]
    runs = {"VSE alone (first stage)": ("vse", ["--model", models["vse"]]), "SGRAF exhaustive": ("sgraf", sgraf)}
    runs.update({f"SGRAF rerank K={k}": (f"rerank{k}", ["--rerank", str(k), "--first-stage", models["vse"], *sgraf])
                 for k in args.k})
    recalls: dict[str, dict[str, float]] = {}
    for label, (key, options) in runs.items():
        rankings = str(folder / f"{key}.jsonl")
        timed_stage(f"match {label}", ["match", *test, *options, "-o", rankings], env, seconds)
        scores = json.loads(timed_stage(f"score {label}", ["score", "retrieval", rankings, "--captions", str(captions),
                                                           "--split", "test"], env, seconds))
        recalls[label] = {f"{way}_R@{r}": scores[way][f"R@{r}"] for way in ("i2t", "t2i") for r in (1, 5, 10)}
    exhaustive = recalls["SGRAF exhaustive"]
    print(f"quality, {args.quality_images} test images x {5 * args.quality_images} captions (R@1 / R@5 / R@10):",
          flush=True)
    for label, row in recalls.items():
        line = " | ".join(f"{way} {row[f'{way}_R@1']:.1f} / {row[f'{way}_R@5']:.1f} / {row[f'{way}_R@10']:.1f}"
                          for way in ("i2t", "t2i"))
        if "rerank" in label:
            row["R@1_change"] = {way: round(row[f"{way}_R@1"] - exhaustive[f"{way}_R@1"], 2) for way in ("i2t", "t2i")}
            line += f"; R@1 minus exhaustive: i2t {row['R@1_change']['i2t']:+.2f}, t2i {row['R@1_change']['t2i']:+.2f}"
        print(f"  {label:24s} {line}", flush=True)
    return {"test_images": args.quality_images, "train_images": args.quality_train_images,
            "epochs": args.quality_epochs, "recall": recalls, "seconds": seconds}


def candidate_counts(text: str) -> list[int]:
    """--k: comma-separated whole numbers."""
    return [int(k) for k in text.split(",")]


def main() -> None:
    if sys.argv[1:2] == ["fraction"]:
        fraction_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--captions-per-image", type=int, default=5)
    parser.add_argument("--k", default=[100, 256], type=candidate_counts,
                        help="candidates per query, comma-separated [100,256]")
    parser.add_argument("--query-every", type=int, default=10,
                        help="rerank every N-th query and project the whole (1: the whole match process)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every process")
    parser.add_argument("--speed", action=argparse.BooleanOptionalAction, default=True,
                        help="the speed part on random release-size models")
    parser.add_argument("--quality", action=argparse.BooleanOptionalAction, default=True,
                        help="also the recall part on a trained synthetic world")
    parser.add_argument("--quality-images", type=int, default=1000, help="test images of the quality world")
    parser.add_argument("--quality-train-images", type=int, default=600)
    parser.add_argument("--quality-epochs", type=int, default=12)
    parser.add_argument("--folder", help="where the inputs are written [a temporary folder]")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; torch threads {args.threads} (OMP_NUM_THREADS); load average "
          f"{load_average()}", flush=True)
    report: dict[str, object] = {"cpu": cpu_model(), "threads": args.threads, "torch": torch.__version__}
    for part, run in (("speed", speed), ("quality", quality)):
        if getattr(args, part):
            with tempfile.TemporaryDirectory(dir=args.folder) as name:
                report[part] = run(Path(name), args)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
