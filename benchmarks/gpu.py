"""The GPU figures of benchmarks/README.md in one run (issue 38): SGRAF matching against the released evaluation's
structure, the whole `match` process and where its time goes, an SGR training step, the bottom-up stage, and SGRAF
exhaustive at COCO 5K x 25K, in fp32 and bf16 (tf32 where it is cheap), with every figure printed beside the GPU's
model, the torch and CUDA versions, the precision and the sizes.

Each section runs in its own process with its own time limit (one that runs over is killed and reported, and the
next still runs; a section that no longer fits the whole run's --budget is skipped and said so), in this order:

- sgraf: release-size random SGR and SAF (match_sgraf's models), 1K images x 1K captions (one of Flickr30K's five a
  image; random regions, real caption lengths), model time (encoding and every pair, the device synchronised):
  vltools' `similarity_blocks` (what `match` runs) in fp32, tf32 and bf16 against the released evaluation's
  structure in fp32 (`match_sgraf.released_match`: every image encoded at once, captions in batches of 128, then
  100 x 100 shards, each a Python loop over its captions), both in this process; the released side runs with TF32
  off too, so that the difference of the fp32 matrices is the algorithms', not TF32's. Printed: seconds, the ratio,
  the largest difference and how often the top-1 of each direction agrees with fp32's.
- process: the same 1K x 1K as whole processes (flickr_1k.compare: `vltools match --model sgr.pt --model saf.pt
  --sims --device D` against the released loop's process), then a third process runs the same command in-process
  with its phases timed (phases.py, the table match_phases.py prints on a CPU): the interpreter's start, importing
  torch and vltools, CUDA's initialisation, the checkpoint load and digests, reading the captions, checking the
  images, tokenising, reading the features, the model (encoding, every pair), the resume checkpoint, top-k, writing
  the rankings and the matrix, and the process's exit.
- train: one SGR training step at the released size (train_sgraf: the same batch of 128, dropout off, the
  hardest-negative loss, backward, clipping, Adam) of vltools and of the released structure, in fp32, tf32 and bf16;
  their losses and gradients compared in fp32.
- bottom_up: the bottom-up stage, release-size random detector, 900 x 600 photos (extract.bottom_up: the stage's
  images/s, the forward's alone, each part's share of the forward, class-wise NMS and the selection among them), in
  fp32 then bf16, and bf16's boxes against fp32's. Random weights score every class alike, so which boxes are kept
  is decided by near-ties and bf16's rounding moves them: the comparison says how much, not whether a trained
  detector keeps its boxes (tests/test_cuda.py checks that on a detector without ties).
- coco: SGRAF exhaustive over COCO's 5K images x 25K captions in bf16 and fp32 (random weights): a pilot block of
  images against every caption in each precision, then as many images as the section's time allows, projected to 5K
  by the pairs; the largest difference of the two matrices and the agreement of their top-1s. Recall on a trained
  set is not measured (no trained release-size model, and training one does not fit the run).

`--dry-run`: every section and code path at tiny sizes (a small detector, a few images and captions), on the CPU in
a minute or two. `--device cpu --limit-factor 100` runs the full sizes on a CPU (hours). What the run prints goes
to standard output and to OUT/gpu.txt, with OUT/gpu.json (every figure) and OUT/gpu.md (the table for
benchmarks/README.md); OUT is --out, else the environment's $OUT, else out/gpu. benchmarks/gpu.sh runs it on the GPU
machine with the CUDA tests.

    python benchmarks/gpu.py [--dry-run] [--device auto] [--budget 340] [--limit-factor 1] [--sections sgraf,...] \
        [--threads 16] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

START = time.perf_counter()
HERE = Path(__file__).resolve().parent
SECTIONS = ("sgraf", "process", "train", "bottom_up", "coco")
LEAST_SECONDS = 15          # a section is not started with less time than this left
# a dry run's SGR and SAF (the released regions, 36 x 2048; smaller embeddings), and its detector, small enough for
# a CPU, with every part of the released one
DRY_MATCHING = {"embed_size": 64, "word_dim": 32, "sim_dim": 16}
DRY_DETECTOR = {"stem_channels": 16, "res2_channels": 64, "bottleneck_channels": 16, "blocks": [1, 1, 1],
                "res5_blocks": 1, "rpn_channels": 64, "num_classes": 21, "num_attributes": 11, "rpn_pre_nms": 600,
                "rpn_post_nms": 100, "test_scale": 300, "test_max_size": 500}


@dataclass(frozen=True)
class Sizes:
    """What each section measures, and its time limit in seconds."""

    pairs: tuple[int, int] = (1000, 1000)          # sgraf and process: images x captions (one caption an image)
    train_batch: int = 128
    train_steps: int = 3
    bottom_up_images: int = 64
    bottom_up_batch: int = 8
    bottom_up_workers: int = 4
    bottom_up_warmup: int = 8
    matching: dict = field(default_factory=dict)   # SGR and SAF settings changed from the released sizes
    detector: dict = field(default_factory=dict)   # the detector's, likewise
    coco: tuple[int, int] = (5000, 25000)
    coco_pilot: int = 64
    limits: dict = field(default_factory=lambda: {"sgraf": 70, "process": 90, "train": 40, "bottom_up": 75,
                                                  "coco": 65})


FULL = Sizes()
DRY = Sizes(pairs=(12, 12), train_batch=8, train_steps=1, bottom_up_images=2, bottom_up_batch=2, bottom_up_workers=1,
            bottom_up_warmup=1, matching=DRY_MATCHING, detector=DRY_DETECTOR, coco=(24, 60), coco_pilot=8,
            limits={"sgraf": 60, "process": 90, "train": 60, "bottom_up": 60, "coco": 45})


# ---------- what a section prints and returns ----------

class Report:
    """A section's figures: each printed with the device, precision and sizes beside it, and kept as a table row."""

    def __init__(self, context: str) -> None:
        self.context = context
        self.rows: list[dict[str, object]] = []
        self.figures: dict[str, object] = {}

    def row(self, what: str, vltools: str, released: str, ratio: str, note: str, precision: str, sizes: str) -> None:
        """One row of the README's table, printed as one line."""
        self.rows.append({"what": what, "vltools": vltools, "released": released, "ratio": ratio, "note": note,
                          "precision": precision, "sizes": sizes})
        print(f"== {what}: vltools {vltools} | released structure {released} | {ratio} | {note} "
              f"[{precision}; {sizes}; {self.context}]", flush=True)

    @contextlib.contextmanager
    def attempt(self, what: str, precision: str) -> Iterator[None]:
        """Run one measurement; if it raises, its traceback is printed, a row says it failed, and the section goes
        on to the next (one run on a lent GPU should bring back all it can)."""
        try:
            yield
        except Exception as exc:
            traceback.print_exc(file=sys.stdout)
            self.row(what, f"failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}", "-", "-", "",
                     precision, "-")


def seconds_since(start: float) -> float:
    return time.perf_counter() - start


@contextlib.contextmanager
def clock(device: str, into: dict[str, float], key: str) -> Iterator[None]:
    """Time the block into `into[key]`, the device's queued work included (synchronised before and after)."""
    from machine import synchronize

    synchronize(device)
    start = time.perf_counter()
    yield
    synchronize(device)
    into[key] = seconds_since(start)


def matching_size(sizes: Sizes) -> str:
    return "small (dry run)" if sizes.matching else "release-size"


def release_models(device: str, settings: dict) -> list:
    """Random SGR and SAF at the released sizes (or with `settings` changed) with the SGRAF Flickr30K vocabulary, in
    eval mode on `device`."""
    import torch
    from match_sgraf import VOCAB

    from vltools.data.converters.scan_vocab import load_vocabulary
    from vltools.models import build_model

    size = len(load_vocabulary(VOCAB))
    models = []
    for seed, name in enumerate(("sgr", "saf")):
        torch.manual_seed(seed)
        models.append(build_model(name, settings, size).eval().to(device))
    return models


def score_agreement(reference, other) -> dict[str, float]:
    """The largest difference of two score matrices and how often each direction's top-1 agrees."""
    return {"max_abs_diff": float((other - reference).abs().max()),
            "top1_i2t": float((other.argmax(1) == reference.argmax(1)).float().mean()),
            "top1_t2i": float((other.argmax(0) == reference.argmax(0)).float().mean())}


def agreement_note(found: dict[str, float], against: str) -> str:
    return (f"{found['max_abs_diff']:.1e} from {against}; top-1 agrees {100 * found['top1_i2t']:.1f}% (i2t), "
            f"{100 * found['top1_t2i']:.1f}% (t2i)")


# ---------- the sections ----------

def section_sgraf(args: argparse.Namespace, sizes: Sizes, report: Report, folder: Path) -> None:
    """SGRAF model time at Flickr30K 1K x 1K: vltools in fp32, tf32, bf16 against the released structure in fp32."""
    import torch
    from match_sgraf import CAPTION_BLOCK, IMAGE_BLOCK, real_captions, released_match, vltools_match

    from vltools.devices import float32_mode

    n_images, n_captions = sizes.pairs
    models = release_models(args.device, sizes.matching)
    regions = torch.randn(n_images, 36, 2048, generator=torch.Generator().manual_seed(0))
    tokens, lengths = real_captions(n_captions)
    on_device = regions.to(args.device), tokens.to(args.device)
    blocks = f"blocks of {IMAGE_BLOCK} images x {CAPTION_BLOCK} captions (match's)"
    seconds: dict[str, float] = {}

    def released() -> torch.Tensor:
        with float32_mode("fp32"):
            return sum(released_match(model, *on_device, lengths)[0] for model in models) / len(models)

    def timed_match(precision: str) -> torch.Tensor:
        """vltools in `precision` after a warm-up on one block (CUDA's kernels and handles, autocast's caches)."""
        vltools_match(models, regions[:IMAGE_BLOCK], tokens[:CAPTION_BLOCK], lengths[:CAPTION_BLOCK], precision,
                      args.device)
        with clock(args.device, seconds, precision):
            return vltools_match(models, regions, tokens, lengths, precision, args.device)

    released_match(models[0], on_device[0][:4], on_device[1][:8], lengths[:8])    # warm-up
    with clock(args.device, seconds, "released"):
        reference = released()
    fp32 = timed_match("fp32")
    pairs = f"{n_images} images x {n_captions} captions, {matching_size(sizes)} SGR + SAF"
    exact = score_agreement(reference, fp32)
    report.figures.update(seconds=seconds, fp32_vs_released=exact)
    ratio = seconds["released"] / seconds["fp32"]
    report.row("SGRAF model time (encoding + every pair, synchronised)", f"{seconds['fp32']:.2f} s",
               f"{seconds['released']:.2f} s", f"{ratio:.1f}x", f"sims {exact['max_abs_diff']:.1e} apart", "fp32",
               f"{pairs}; vltools {blocks}, released 100 x 100 shards")
    for precision in ("tf32", "bf16"):
        what = f"same, vltools in {precision}"
        with report.attempt(what, precision):
            found = score_agreement(fp32, timed_match(precision))
            report.figures[f"{precision}_vs_fp32"] = found
            report.row(what, f"{seconds[precision]:.2f} s", f"{seconds['released']:.2f} s (fp32)",
                       f"{seconds['released'] / seconds[precision]:.1f}x", agreement_note(found, "vltools fp32"),
                       precision, f"{pairs}; {blocks}")


def section_process(args: argparse.Namespace, sizes: Sizes, report: Report, folder: Path) -> None:
    """The whole `vltools match` process against the released loop's, then where vltools' process spends its time."""
    from flickr_1k import compare, write_captions, write_features
    from match_sgraf import save_release_model
    from phases import MODEL, measure, print_phases

    n_images, n_captions = sizes.pairs[0], sizes.pairs[0]
    features, captions = folder / "feats.h5", folder / "captions.jsonl"
    ids = write_features(features, n_images)
    write_captions(captions, ids, 5, every=5)      # 1 of Flickr30K's 5 captions an image
    for name in ("sgr", "saf"):
        save_release_model(folder / f"{name}.pt", name, settings=sizes.matching)
    whole = compare("sgraf", folder, features, captions, args.threads, args.device)
    what = f"{n_images} images x {n_captions} captions, {matching_size(sizes)} SGR + SAF, {args.threads} CPU threads"
    report.figures["whole"] = whole
    ours, theirs = whole["vltools"], whole["released"]
    report.row("SGRAF, whole `vltools match` process against the released loop's process (wall / CPU)",
               f"{ours['wall_s']:.1f} s / {ours['cpu_s']:.1f} s", f"{theirs['wall_s']:.1f} s / {theirs['cpu_s']:.1f} s",
               f"{whole['speedup_wall']}x", f"sims {whole['max_abs_diff']:.1e} apart", "fp32", what)
    found = measure([str(features), str(captions), "--model", str(folder / "sgr.pt"), "--model",
                     str(folder / "saf.pt"), "--sims", str(folder / "p.h5"), "-o", str(folder / "p.jsonl"), "--device",
                     args.device], {**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    report.figures.update(phases=found.phases, phases_process_wall_s=found.wall_s)
    print(f"where the match process's {found.wall_s:.2f} s go:", flush=True)
    print_phases({what: found})
    model = found.phases[MODEL]
    report.row("where the `match` process's time goes", f"{found.wall_s:.1f} s", "-",
               f"model {100 * model / found.wall_s:.0f}%",
               f"everything but the model {found.outside_model:.1f} s, {100 * (1 - model / found.wall_s):.0f}% "
               "(phases printed above)", "fp32", what)


def section_train(args: argparse.Namespace, sizes: Sizes, report: Report, folder: Path) -> None:
    """One SGR training step at the released size, vltools against the released structure, fp32 / tf32 / bf16."""
    from match_sgraf import VOCAB
    from train_sgraf import agreement, make_batch, no_dropout, released_loss, timed_steps, vltools_loss

    from vltools.data.converters.scan_vocab import load_vocabulary
    from vltools.devices import float32_mode
    from vltools.models import build_model

    model = no_dropout(build_model("sgr", sizes.matching, len(load_vocabulary(VOCAB)))).train().to(args.device)
    batch = tuple(tensor.to(args.device) for tensor in make_batch(sizes.train_batch))
    with float32_mode("fp32"):
        same = agreement(model, batch)
    report.figures["agreement_fp32"] = same
    what = (f"{matching_size(sizes)} SGR, batch {sizes.train_batch}, dropout off, best of {sizes.train_steps} steps "
            "after a warm-up")
    for precision in ("fp32", "tf32", "bf16"):
        with report.attempt("SGR training step", precision):
            released = timed_steps(model, released_loss, batch, sizes.train_steps, precision)
            ours = timed_steps(model, vltools_loss, batch, sizes.train_steps, precision)
            report.figures[precision] = {"vltools": ours, "released": released}
            note = (f"losses {same['loss_vltools']:.6f} and {same['loss_released']:.6f}, gradients "
                    f"{same['max_grad_diff_relative']:.1e} apart (relative)" if precision == "fp32" else "")
            report.row("SGR training step", f"{1000 * ours['wall_s']:.0f} ms",
                       f"{1000 * released['wall_s']:.0f} ms", f"{released['wall_s'] / ours['wall_s']:.1f}x", note,
                       precision, what)


def section_bottom_up(args: argparse.Namespace, sizes: Sizes, report: Report, folder: Path) -> None:
    """The bottom-up stage and the detector's forward in fp32 and bf16, and bf16's boxes against fp32's."""
    import numpy as np
    from extract import bottom_up, save_random_detector

    from vltools.io.features import FeaturesReader

    detector = save_random_detector(folder / "detector.pt", settings=sizes.detector)
    size = "a small detector (dry run)" if sizes.detector else "release-size random detector"
    what = (f"{size}, {sizes.bottom_up_images} photos of 900 x 600, batch {sizes.bottom_up_batch}, "
            f"{sizes.bottom_up_workers} decode workers, 10-100 boxes")
    boxes = {}
    for precision in ("fp32", "bf16"):
        options = argparse.Namespace(images=sizes.bottom_up_images, batch_size=sizes.bottom_up_batch,
                                     workers=sizes.bottom_up_workers, device=args.device,
                                     warmup=sizes.bottom_up_warmup, precision=precision)
        (folder / precision).mkdir()
        with report.attempt("bottom-up stage", precision):
            found = bottom_up(options, folder / precision, detector)
            report.figures[precision] = found
            with FeaturesReader(folder / precision / "feats.h5") as reader:
                boxes[precision] = reader.read(reader.ids, ["boxes", "num_regions"])
            nms = found["part_shares"].get("class-wise nms and selection", 0.0)
            report.row("bottom-up stage", f"{found['stage_images_per_s']:.1f} images/s", "-", "-",
                       f"forward alone {found['forward_images_per_s']:.1f} images/s; class-wise NMS and the "
                       f"released selection {100 * nms:.0f}% of the forward", precision, what)
    if len(boxes) < 2:
        return
    full, low = boxes["fp32"], boxes["bf16"]
    same_count = full["num_regions"] == low["num_regions"]
    within = [np.abs(low["boxes"][i, :n] - full["boxes"][i, :n]).max(axis=1) <= 1.0
              for i, n in enumerate(full["num_regions"]) if same_count[i]]
    kept = np.concatenate(within) if within else np.zeros(0, dtype=bool)
    compared = {"images_same_count": float(same_count.mean()), "boxes_within_1px": float(kept.mean())
                if len(kept) else 0.0, "boxes_compared": len(kept)}
    report.figures["bf16_boxes_vs_fp32"] = compared
    report.row("bottom-up bf16 boxes against fp32's", f"{100 * compared['images_same_count']:.0f}% of images keep "
               "as many boxes", "-", "-", f"{100 * compared['boxes_within_1px']:.0f}% of {len(kept)} boxes within "
               "1 px (random weights: near-ties decide, see the docstring)", "bf16 vs fp32", what)


def section_coco(args: argparse.Namespace, sizes: Sizes, report: Report, folder: Path) -> None:
    """SGRAF exhaustive at COCO 5K x 25K in bf16 and fp32: a measured share of the images, projected to all."""
    import torch
    from match_sgraf import CAPTION_BLOCK, IMAGE_BLOCK, real_captions, vltools_match

    n_images, n_captions = sizes.coco
    models = release_models(args.device, sizes.matching)
    tokens, lengths = real_captions(n_captions)
    generator = torch.Generator().manual_seed(1)
    regions = torch.randn(sizes.coco_pilot, 36, 2048, generator=generator)
    for precision in ("fp32", "bf16"):          # warm-up, one block
        vltools_match(models, regions[:IMAGE_BLOCK], tokens[:CAPTION_BLOCK], lengths[:CAPTION_BLOCK], precision,
                      args.device)

    def measure(images: torch.Tensor) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
        seconds, sims = {}, {}
        for precision in ("bf16", "fp32"):
            with clock(args.device, seconds, precision):
                sims[precision] = vltools_match(models, images, tokens, lengths, precision, args.device)
        return seconds, sims

    seconds, sims = measure(regions)
    per_image = sum(seconds.values()) / len(regions)
    left = (args.seconds or sizes.limits["coco"]) - seconds_since(START) - 10
    count = min(n_images, int(left / per_image) // sizes.coco_pilot * sizes.coco_pilot)
    if count > len(regions):
        regions = torch.cat([regions, torch.randn(count - len(regions), 36, 2048, generator=generator)])
        seconds, sims = measure(regions)
    measured = len(regions)
    projected = {precision: spent * n_images / measured for precision, spent in seconds.items()}
    found = score_agreement(sims["fp32"], sims["bf16"])
    report.figures.update(measured_images=measured, seconds=seconds, projected_s=projected, bf16_vs_fp32=found)
    what = (f"{n_images} images x {n_captions} captions, {matching_size(sizes)} SGR + SAF, random weights; measured on "
            f"{measured} images x {n_captions} captions ({100 * measured / n_images:.0f}%), projected by the pairs")
    print(f"coco: R@1/5/10 of bf16 against fp32 on a trained set: not measured (no trained release-size model; "
          f"training one does not fit this run); on these random weights: {agreement_note(found, 'fp32')}",
          flush=True)
    for precision in ("bf16", "fp32"):
        report.row("SGRAF exhaustive, COCO 5K x 25K", f"{projected[precision]:.0f} s projected "
                   f"({seconds[precision]:.1f} s measured)", "-", "-",
                   agreement_note(found, "fp32") if precision == "bf16" else
                   f"bf16 {projected['fp32'] / projected['bf16']:.2f}x faster", precision, what)


# ---------- running the sections ----------

def section_main(args: argparse.Namespace) -> None:
    """`gpu.py --section NAME ...`: one section in this process; its figures as one JSON object on the last line."""
    import torch
    from machine import accelerator, describe

    from vltools.io.progress import configure

    configure(quiet=True)
    torch.set_num_threads(args.threads)
    sizes = DRY if args.dry_run else FULL
    report = Report(describe(accelerator(args.device)))
    run = {"sgraf": section_sgraf, "process": section_process, "train": section_train, "bottom_up": section_bottom_up,
           "coco": section_coco}[args.section]
    with tempfile.TemporaryDirectory(prefix=f"vltools-gpu-{args.section}-", dir=args.folder) as folder:
        run(args, sizes, report, Path(folder))
    print(json.dumps({"section": args.section, "seconds": round(seconds_since(START), 1), "rows": report.rows,
                      "figures": report.figures}, default=str))


class Log:
    """Lines to standard output and to OUT/gpu.txt at once."""

    def __init__(self, path: Path) -> None:
        self.stream = path.open("w", encoding="utf-8")
        self.lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self.lock:
            print(line, flush=True)
            self.stream.write(line + "\n")
            self.stream.flush()


def run_section(name: str, limit: float, args: argparse.Namespace, say: Callable[[str], None]) -> dict:
    """The section in a fresh process killed after `limit` seconds, its lines passed to `say` as they come."""
    argv = [sys.executable, __file__, "--section", name, "--device", args.device, "--threads", str(args.threads),
            "--seconds", str(int(limit))] + (["--dry-run"] if args.dry_run else []) \
        + (["--folder", args.folder] if args.folder else [])
    start = time.perf_counter()
    lines: list[str] = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as child:
        def copy() -> None:
            for line in child.stdout:
                lines.append(line.rstrip("\n"))
                if not lines[-1].startswith("{"):
                    say(lines[-1])

        reader = threading.Thread(target=copy)
        reader.start()
        stopped = False
        try:
            child.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)   # the section and every process it started
            stopped = True
            child.wait()
        reader.join()
    spent = seconds_since(start)
    if child.returncode == 0 and lines and lines[-1].startswith("{"):
        return json.loads(lines[-1])
    why = (f"stopped at its limit of {limit:.0f} s" if stopped else
           f"failed (exit status {child.returncode}): {lines[-1] if lines else 'no output'}")
    say(f"== section {name} {why}")
    return {"section": name, "seconds": round(spent, 1), "error": why, "rows": []}


def markdown(rows: list[dict], header: str) -> str:
    """The table of benchmarks/README.md's GPU section."""
    lines = [header, "", "| what | vltools | released structure | ratio | notes | precision | sizes |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['what']} | {r['vltools']} | {r['released']} | {r['ratio']} | {r['note']} | {r['precision']} "
              f"| {r['sizes']} |" for r in rows]
    return "\n".join(lines) + "\n"


def commit() -> str:
    """The checkout's commit, when git and the repository are there (the GPU machine gets a copy without .git)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git repository here)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes: every section and code path in minutes")
    parser.add_argument("--device", default="auto", help="auto (CUDA when there is one), cuda[:k] or cpu")
    parser.add_argument("--budget", type=float, help="seconds for all the sections together [the sum of their "
                        "limits: 340 s at the full sizes]")
    parser.add_argument("--limit-factor", type=float, default=1.0, help="multiplies every section's time limit "
                        "(e.g. 20 for the full sizes on a CPU)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1), help="torch CPU threads")
    parser.add_argument("--out", help="where gpu.txt, gpu.json and gpu.md go [$OUT, else out/gpu]")
    parser.add_argument("--folder", help="where the inputs are written [a temporary folder]")
    parser.add_argument("--section", choices=SECTIONS, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.section:
        section_main(args)
        return
    chosen = args.sections.split(",")
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; choose among {', '.join(SECTIONS)}")
    import torch
    from machine import accelerator, cpu_model, describe, load_average

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out or os.environ.get("OUT") or "out/gpu")
    out.mkdir(parents=True, exist_ok=True)
    say = Log(out / "gpu.txt")
    info = accelerator(args.device)
    sizes = DRY if args.dry_run else FULL
    limits = {name: seconds * args.limit_factor for name, seconds in sizes.limits.items()}
    args.budget = args.budget or sum(limits[name] for name in chosen)
    header = (f"{describe(info)}; CPU {cpu_model()}, {os.cpu_count()} cores, {args.threads} torch threads; commit "
              f"{commit()}; {time.strftime('%Y-%m-%d %H:%M %Z')}{'; DRY RUN (tiny sizes)' if args.dry_run else ''}")
    say(f"gpu.py on {args.device}: {header}; load average {load_average()}; budget {args.budget:.0f} s")
    results = []
    for name in chosen:
        left = args.budget - seconds_since(START)
        limit = min(limits[name], left)
        if limit < LEAST_SECONDS:
            say(f"== section {name} skipped: {left:.0f} s of the budget left")
            results.append({"section": name, "error": f"skipped: {left:.0f} s of the budget left", "rows": []})
            continue
        say(f"-- section {name} (limit {limit:.0f} s; load average {load_average()})")
        results.append(run_section(name, limit, args, say))
        say(f"-- section {name}: {results[-1]['seconds']} s")
    rows = [row for result in results for row in result["rows"]]
    (out / "gpu.md").write_text(markdown(rows, header), encoding="utf-8")
    summary = {"header": header, "accelerator": info, "sizes": asdict(sizes), "sections": results,
               "seconds": round(seconds_since(START), 1)}
    (out / "gpu.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    say(markdown(rows, header))
    say(f"gpu.py: {summary['seconds']} s in all; {sum('error' in r for r in results)} section(s) without figures; "
        f"written {out}/gpu.txt, gpu.json, gpu.md")
    print(json.dumps(summary, default=str))


if __name__ == "__main__":
    main()
