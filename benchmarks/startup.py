"""Benchmark of start-up and small jobs: each stage's wall time on a 10-image synthetic world, against
`python -c "import torch"` and `python -c "import vltools"` measured in the same run (the Unix-tool feel).

The jobs are the examples of the stages' --help (vltools.cli.EXAMPLES: tiny models trained for one epoch, small
images, all offline), run on a world of `--images` images. The commands that make what the chosen stages read
(the world, features, checkpoints, rankings...) run once in a temporary folder, each found from the files the
examples name; then each stage's own command runs `--runs` times (after one unmeasured warm-up), each a fresh
process writing its output into a new folder (and a new model store), and the median is reported:
  - `seconds`: the whole process, start to exit. A stage that writes a file has produced nothing usable before
    the file is renamed into place at its end, so this is the honest figure for every stage;
  - `first_byte_s`: for a stage that writes to standard output (no -o: inspect, score), the time to the first
    byte it writes there;
  - `ratio`: `seconds` / the median of `python -c "import torch"`.
Prints the CPU, its threads and the load average before and after each stage, a table, then one JSON object on the
last line. A stage whose command (or a command making its input) fails is reported with the error's last line.

    python benchmarks/startup.py [--runs 3] [--images 10] [--stages match,score]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from help import median_wall
from machine import cpu_model, load_average

from vltools.cli import EXAMPLES

POSITIONAL_OUTPUT = {"synth", "report"}  # stages whose output folder is their first argument
OUTPUT_OPTIONS = ("-o", "--sims")  # options of the examples that name a file the stage writes


@dataclass
class Command:
    """One command line of the examples: the example it belongs to, its words after `vltools` (the stage first),
    and the indices of the earlier commands that make its inputs."""

    example: str
    words: list[str]
    needs: set[int] = field(default_factory=set)

    @property
    def stage(self) -> str:
        """The stage the command runs."""
        return self.words[0]

    @property
    def output_positions(self) -> list[int]:
        """Where the paths it writes are among `words` (none: it writes to standard output or a model store)."""
        positions = [number + 1 for number, word in enumerate(self.words) if word in OUTPUT_OPTIONS]
        return positions + ([1] if self.stage in POSITIONAL_OUTPUT else [])

    @property
    def outputs(self) -> list[str]:
        """The paths it writes, as the example names them."""
        return [self.words[position] for position in self.output_positions]


def chain(images: int) -> list[Command]:
    """Every command of the examples in order, the world made with `images` images, each knowing which earlier
    commands make the files it reads: for each word, the latest command writing that path, or a file beside it
    (vse.pt.log.jsonl of vse.pt) or inside it (world/captions.jsonl of world)."""
    commands: list[Command] = []
    for example, text in EXAMPLES.items():
        for line in text.replace("\\\n", " ").splitlines():
            command = Command(example, shlex.split(line)[1:])
            if command.stage == "synth":
                command.words[command.words.index("--images") + 1] = str(images)
            for position, word in enumerate(command.words):
                if position in command.output_positions:
                    continue
                for index in range(len(commands) - 1, -1, -1):
                    if any(word == made or word.startswith((made + "/", made + "."))
                           for made in commands[index].outputs):
                        command.needs.add(index)
                        break
            commands.append(command)
    return commands


def timed_command(commands: list[Command], stage: str) -> int:
    """The index of the stage's own command: the last command of its example that runs it."""
    return [index for index, command in enumerate(commands) if command.example == stage == command.stage][-1]


def closure(commands: list[Command], index: int) -> set[int]:
    """The indices of every command that `commands[index]` needs, directly or through others."""
    found: set[int] = set()
    todo = list(commands[index].needs)
    while todo:
        current = todo.pop()
        if current not in found:
            found.add(current)
            todo.extend(commands[current].needs)
    return found


def vltools(words: list[str]) -> list[str]:
    """The argv of `vltools WORDS` in this interpreter."""
    return [sys.executable, "-m", "vltools", *words]


def last_line(path: Path) -> str:
    """The last non-empty line of a log file (the error of a failed command)."""
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


def setup(commands: list[Command], needed: set[int], folder: Path) -> dict[int, str]:
    """Run the `needed` commands in order in `folder` (model store `folder`/models); the error of each that
    failed, or of the command it needed that failed."""
    env = {**os.environ, "VLTOOLS_MODELS": str(folder / "models")}
    failed: dict[int, str] = {}
    for index in sorted(needed):
        command = commands[index]
        broken = [failed[i] for i in command.needs if i in failed]
        if broken:
            failed[index] = broken[0]
            continue
        log = folder / f"setup-{index}.log"
        with log.open("w") as stderr:
            status = subprocess.run(vltools(command.words), cwd=folder, env=env, stdout=subprocess.DEVNULL,
                                    stderr=stderr).returncode
        print(f"  setup: vltools {shlex.join(command.words)}: exit {status}", flush=True)
        if status != 0:
            failed[index] = f"vltools {command.stage} (setup) exited {status}: {last_line(log)}"
    return failed


def one_run(command: Command, folder: Path, run: Path) -> tuple[float, float | None]:
    """One fresh process of `command` in `folder`, its output (and model store) in the new folder `run`: wall
    seconds to exit and to its first byte on standard output (None: it wrote none)."""
    run.mkdir(parents=True)
    words = list(command.words)
    for position in command.output_positions:
        words[position] = str(run / Path(words[position]).name)
    env = {**os.environ, "VLTOOLS_MODELS": str(run / "models")}
    log = run / "stderr.log"
    with log.open("w") as stderr:
        start = time.perf_counter()
        with subprocess.Popen(vltools(words), cwd=folder, env=env, stdout=subprocess.PIPE, stderr=stderr) as child:
            first = child.stdout.read(1)
            first_byte = time.perf_counter() - start if first else None
            child.stdout.read()
            status = child.wait()
        seconds = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(f"exited {status}: {last_line(log)}")
    return seconds, first_byte


def measure(command: Command, folder: Path, runs: int) -> dict:
    """Median whole-process and first-byte seconds over `runs` runs after one warm-up, with the load around."""
    before = load_average()
    times, first_bytes = [], []
    for number in range(runs + 1):
        seconds, first_byte = one_run(command, folder, folder / "timed" / f"{command.stage}-{number}")
        if number:
            times.append(seconds)
            first_bytes.append(first_byte)
    first = None if None in first_bytes else round(statistics.median(first_bytes), 3)
    return {"seconds": round(statistics.median(times), 3), "first_byte_s": first, "load_before": before,
            "load_after": load_average()}


def stage_list(text: str) -> list[str]:
    """`--stages match,score` -> ["match", "score"], each one of the examples' stages."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in EXAMPLES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: give stages among {', '.join(EXAMPLES)}, comma-separated")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="Measured runs per command (median).")
    parser.add_argument("--images", type=int, default=10, help="Images of the synthetic world (at least 10).")
    parser.add_argument("--stages", type=stage_list, default=list(EXAMPLES),
                        help="Stages to time, comma-separated [all].")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} threads; load average before: "
          f"{' '.join(map(str, load_average()))}", flush=True)
    python = [sys.executable, "-c"]
    baselines = {name: round(median_wall([*python, f"import {name}"], args.runs), 3) for name in ("torch", "vltools")}
    print(f"python -c 'import torch' {baselines['torch']:.3f} s; python -c 'import vltools' "
          f"{baselines['vltools']:.3f} s", flush=True)
    commands = chain(args.images)
    timed = {stage: timed_command(commands, stage) for stage in args.stages}
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="vltools-startup-") as tmp:
        folder = Path(tmp)
        failed = setup(commands, set().union(*(closure(commands, index) for index in timed.values())), folder)
        for stage, index in timed.items():
            broken = [failed[i] for i in commands[index].needs if i in failed]
            try:
                if broken:
                    raise RuntimeError(broken[0])
                results[stage] = measure(commands[index], folder, args.runs)
            except RuntimeError as exc:
                results[stage] = {"error": str(exc)}
                print(f"{stage:16s} failed: {exc}", flush=True)
                continue
            result = results[stage]
            result["ratio"] = round(result["seconds"] / baselines["torch"], 2)
            first = "-" if result["first_byte_s"] is None else f"{result['first_byte_s']:.3f}"
            print(f"{stage:16s} {result['seconds']:7.3f} s  first byte {first:>7s}  {result['ratio']:5.2f}x import "
                  f"torch  load {' '.join(map(str, result['load_before']))} -> "
                  f"{' '.join(map(str, result['load_after']))}", flush=True)
    print("\n| stage | seconds | first stdout byte | / import torch | load before -> after |\n|---|---|---|---|---|")
    for stage, result in results.items():
        if "error" in result:
            print(f"| {stage} | failed: {result['error']} | | | |")
        else:
            first = "-" if result["first_byte_s"] is None else f"{result['first_byte_s']:.3f}"
            print(f"| {stage} | {result['seconds']:.3f} | {first} | {result['ratio']:.2f} | "
                  f"{result['load_before'][0]} -> {result['load_after'][0]} |")
    print(json.dumps({"benchmark": "startup", "cpu": cpu_model(), "threads": os.cpu_count(), "runs": args.runs,
                      "images": args.images, "import_s": baselines, "stages": results}))


if __name__ == "__main__":
    main()
