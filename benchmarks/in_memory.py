"""`vltools.match` and `vltools.encode` given data in memory against the same calls given files (issue 47, item 4;
target: the in-memory call costs at most 5% more than the files' call).

Inputs (seeded): --images images x 36 x 2,048 random float32 regions (standard normal) with their ids, written as a
features file (float32) and kept as {"ids": [...], "regions": array}; --captions captions (5 per image at the default
sizes; caption k names image k * images // captions), each 8 to 16 words drawn from a small vocabulary (the first
500 words of the SGRAF Flickr30K vocabulary), split test, written as a captions JSONL and kept as the same list of
dicts; a random-initialised VSE at the released size (36 x 2,048 regions, embed 1024, word 300, the SGRAF Flickr30K
vocabulary of 8,481 words: match_sgraf.save_release_model), loaded once and given to every call as a LoadedModel, so
that what differs between the two sides is only the data's way in. (Release-size SGR or SAF would take hours on
1,000 x 5,000 on two cores; VSE's own cost is what a notebook user of separable models waits for.)

Three calls, each on the files and on the same data in memory, in one process, on the CPU with torch's threads:

- match: `vltools.match(FEATS, CAPS, model)` against `vltools.match(features, records, model)`: every pair scored,
  the whole matrix and the top 10 both ways;
- encode images: `vltools.encode(FEATS, model)` against `vltools.encode(features, model)`;
- encode captions: `vltools.encode(CAPS, model)` against `vltools.encode(records, model)`.

Each call runs once on both sides unmeasured, then --repeat rounds of both sides, the order alternating from round to
round (files first, then memory first) so that a drift of the machine's load weighs on both. Printed per call: each
side's minimum and median wall time, the ratio in-memory / files of the minimums (the figure judged: the least
interference by other work) and of the medians, whether the minimums' ratio meets "at most 1.05", the same for the
process's CPU seconds (every thread's, user + system: less moved than wall time by other work on a shared machine),
the largest difference between the two sides' results (the same data: 0 expected), and the CPU model, torch's threads
and the load average before and after; the last line is one JSON object with the same figures.

Beside them, what `vltools.encode(output=None)` spends taking its embeddings through the disk, the same on both
sides (the inference runner commits them to temporary parts, streams them into a temporary embeddings file and
reads that back): from one more in-memory call of each encode, profiled (cProfile), the cumulative seconds of the
parts' writing, reading and removal and of the embeddings file's writing and reading (`ROUND_TRIP`), against the
call's wall time under the profiler. The profiler slows these Python-level calls more than the model's, so both
the seconds and the share are upper bounds.

Run: `.venv/bin/python benchmarks/in_memory.py [--images 1000] [--captions 5000] [--repeat 7]`
(`--images 50 --captions 250 --repeat 2` for a quick try).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from machine import cpu_model, load_average
from match_sgraf import VOCAB, save_release_model

import vltools
from vltools.data.converters.scan_vocab import load_vocabulary
from vltools.io.features import FeaturesWriter
from vltools.io.progress import configure
from vltools.io.records import write_records

TARGET = 1.05          # the in-memory call may cost at most 5% more than the files' call
WORDS = 500            # the small vocabulary captions are drawn from
REGIONS, DIM = 36, 2048
# encode's output through the disk: (module file, function) of the outermost calls that take it there and back
ROUND_TRIP = {("parts.py", "add"), ("parts.py", "rows"), ("parts.py", "remove"), ("embeddings.py", "write_embeddings"),
              ("embeddings.py", "read_embeddings")}


def inputs(folder: Path, n_images: int, n_captions: int, seed: int = 0) -> tuple[dict, list[dict], Path, Path]:
    """The features in memory, the captions as records, and the same written as FEATS.h5 and CAPS.jsonl."""
    rng = np.random.default_rng(seed)
    ids = [f"img{i}" for i in range(n_images)]
    features = {"ids": ids, "regions": rng.standard_normal((n_images, REGIONS, DIM), dtype=np.float32)}
    words = load_vocabulary(VOCAB).words[4:4 + WORDS]      # after <pad>, <start>, <end>, <unk>
    records = [{"image_id": ids[k * n_images // n_captions], "split": "test",
                "caption": " ".join(rng.choice(words, size=int(rng.integers(8, 17))))} for k in range(n_captions)]
    feats, caps = folder / "feats.h5", folder / "caps.jsonl"
    with FeaturesWriter(feats, {"backbone": "random"}, dtype="float32") as writer:
        writer.add(ids, regions=features["regions"])
    write_records(caps, records)
    return features, records, feats, caps


def compared(calls: dict[str, Callable[[], object]], repeat: int) -> tuple[dict[str, dict[str, list[float]]], dict]:
    """Wall and CPU seconds (this process's, every thread's, user + system) of each call's `repeat` rounds (after one
    unmeasured), the order alternating, and each call's last result."""
    results = {side: call() for side, call in calls.items()}
    seconds: dict[str, dict[str, list[float]]] = {clock: {side: [] for side in calls} for clock in ("wall", "cpu")}
    for round_number in range(repeat):
        for side in list(calls)[::1 if round_number % 2 == 0 else -1]:
            wall, cpu = time.perf_counter(), time.process_time()
            results[side] = calls[side]()
            seconds["cpu"][side].append(time.process_time() - cpu)
            seconds["wall"][side].append(time.perf_counter() - wall)
    return seconds, results


def difference(files: object, memory: object) -> float:
    """The largest absolute difference between the two sides' results (the matrix of a Matches, the vectors of
    Embeddings), and that they name the same ids."""
    if isinstance(files, vltools.Matches):
        assert (files.row_ids, files.column_ids) == (memory.row_ids, memory.column_ids)
        return float(np.abs(files.sims - memory.sims).max())
    assert files.ids == memory.ids
    return float(np.abs(np.asarray(files.vectors) - np.asarray(memory.vectors)).max())


def measure(name: str, calls: dict[str, Callable[[], object]], repeat: int) -> dict[str, object]:
    """One call on both sides: its figures, printed and returned."""
    before = load_average()
    seconds, results = compared(calls, repeat)
    after = load_average()
    row: dict[str, object] = {}
    for clock, times in seconds.items():
        best = {side: min(values) for side, values in times.items()}
        median = {side: statistics.median(values) for side, values in times.items()}
        row[clock] = {"files_s": [round(t, 3) for t in times["files"]],
                      "memory_s": [round(t, 3) for t in times["memory"]],
                      "files_min_s": round(best["files"], 3), "memory_min_s": round(best["memory"], 3),
                      "files_median_s": round(median["files"], 3), "memory_median_s": round(median["memory"], 3),
                      "ratio_min": round(best["memory"] / best["files"], 4),
                      "ratio_median": round(median["memory"] / median["files"], 4)}
    wall, cpu = row["wall"], row["cpu"]
    row.update(ratio=wall["ratio_min"], met=wall["ratio_min"] <= TARGET,
               max_abs_diff=difference(results["files"], results["memory"]), load_before=before, load_after=after)
    print(f"{name:15s}: files min {wall['files_min_s']:.3f} s (median {wall['files_median_s']:.3f}), in memory "
          f"min {wall['memory_min_s']:.3f} s (median {wall['memory_median_s']:.3f}); in memory / files "
          f"{wall['ratio_min']:.4f} (medians {wall['ratio_median']:.4f}), at most {TARGET}: "
          f"{'met' if row['met'] else 'NOT met'}; CPU seconds min {cpu['files_min_s']:.3f} / "
          f"{cpu['memory_min_s']:.3f}, ratio {cpu['ratio_min']:.4f} (medians {cpu['ratio_median']:.4f}); max abs "
          f"diff {row['max_abs_diff']:.1e}; "
          f"{cpu_model()}, {torch.get_num_threads()} torch threads, load average before {before}, after {after}",
          flush=True)
    return row


def output_round_trip(name: str, call: Callable[[], object]) -> dict[str, float]:
    """The seconds one profiled `call` (an encode without output) spends in `ROUND_TRIP`, and its wall time."""
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.runcall(call)
    wall = time.perf_counter() - start
    spent = sum(stat[3] for (file, _, function), stat in pstats.Stats(profile).stats.items()
                if (Path(file).name, function) in ROUND_TRIP)
    row = {"round_trip_s": round(spent, 3), "call_s": round(wall, 3), "share": round(spent / wall, 4)}
    print(f"{name:15s}: output through the disk (parts and embeddings file, written and read) {spent:.3f} s of the "
          f"in-memory call's {wall:.3f} s under cProfile ({100 * row['share']:.2f}%, upper bounds); load average "
          f"{load_average()}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--captions", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=7, help="measured rounds of each side, after one unmeasured")
    parser.add_argument("--folder", help="where the files are written [a temporary folder]")
    args = parser.parse_args()
    configure(quiet=True)       # no progress lines between the figures
    model = (f"random VSE at the released size (36 x {DIM} regions, embed 1024, word 300, GRU, SGRAF Flickr30K "
             "vocabulary)")
    print(f"CPU: {cpu_model()}; torch {torch.__version__}, {torch.get_num_threads()} threads; load average "
          f"{load_average()}", flush=True)
    print(f"{args.images} images x {REGIONS} x {DIM} float32, {args.captions} captions; {model}; {args.repeat} "
          "rounds a side after one unmeasured", flush=True)
    report: dict[str, object] = {"cpu": cpu_model(), "threads": torch.get_num_threads(), "torch": torch.__version__,
                                 "images": args.images, "captions": args.captions, "model": model,
                                 "repeat": args.repeat, "target": TARGET}
    with tempfile.TemporaryDirectory(dir=args.folder) as name:
        folder = Path(name)
        features, records, feats, caps = inputs(folder, args.images, args.captions)
        loaded = vltools.load_model(save_release_model(folder / "vse.pt", "vse"), "encodable")
        calls = {
            "match": {"files": lambda: vltools.match(feats, caps, loaded),
                      "memory": lambda: vltools.match(features, records, loaded)},
            "encode images": {"files": lambda: vltools.encode(feats, loaded),
                              "memory": lambda: vltools.encode(features, loaded)},
            "encode captions": {"files": lambda: vltools.encode(caps, loaded),
                                "memory": lambda: vltools.encode(records, loaded)},
        }
        report["calls"] = {name: measure(name, sides, args.repeat) for name, sides in calls.items()}
        report["output_round_trip"] = {name: output_round_trip(name, calls[name]["memory"])
                                       for name in ("encode images", "encode captions")}
    report["met"] = all(row["met"] for row in report["calls"].values())
    print(json.dumps(report))


if __name__ == "__main__":
    main()
