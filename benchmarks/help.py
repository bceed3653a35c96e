"""Benchmark of `vltools --help` and every `vltools STAGE --help` against bare Python and `import torch`.

Each command runs in a fresh process `--runs` times (after one unmeasured warm-up that fills the file cache), and
the median wall time is reported beside two baselines measured in the same run: `python -c pass` (the
interpreter's own start) and `python -c "import torch"` (what a help that loads torch would pay at least). The
target is under 0.5 s for every help on an idle machine. The CPU model, thread count and load average (before
and after) are printed, since other work on the machine slows every figure.
Prints readable lines, then one JSON object on the last line.

    python benchmarks/help.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from machine import cpu_model, load_average

from vltools.cli import STAGES

TARGET_S = 0.5


def median_wall(argv: list[str], runs: int) -> float:
    """Median wall seconds of `argv` over `runs` fresh processes, after one warm-up run."""
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="Measured runs per command (median).")
    args = parser.parse_args()
    before = load_average()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} threads; load average before: {' '.join(map(str, before))}",
          flush=True)
    python = [sys.executable]
    commands = {"python -c pass": [*python, "-c", "pass"],
                "python -c 'import torch'": [*python, "-c", "import torch"],
                "vltools --help": [*python, "-m", "vltools", "--help"]}
    commands.update({f"vltools {name} --help": [*python, "-m", "vltools", name, "--help"] for name in STAGES})
    seconds = {}
    for label, argv in commands.items():
        seconds[label] = round(median_wall(argv, args.runs), 3)
        print(f"{label:40s} {seconds[label]:6.3f} s", flush=True)
    after = load_average()
    helps = {label: value for label, value in seconds.items() if label.startswith("vltools")}
    slowest = max(helps, key=helps.get)
    print(f"slowest help: {slowest} {helps[slowest]:.3f} s (target < {TARGET_S} s on an idle machine); "
          f"load average after: {' '.join(map(str, after))}")
    print(json.dumps({"cpu": cpu_model(), "threads": os.cpu_count(), "runs": args.runs, "load_before": before,
                      "load_after": after, "seconds": seconds, "slowest_help_s": helps[slowest]}))


if __name__ == "__main__":
    main()
