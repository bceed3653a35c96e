"""Where a `vltools match` process spends its time (issue 50): the real command run in this process with the
functions of each phase wrapped in a clock, printed the same way by match_phases.py (CPU) and gpu.py (GPU).

`python benchmarks/phases.py [--stand-in] MATCH_ARGS...` imports torch and the modules `match` runs (timed), then
runs `vltools --quiet match MATCH_ARGS` through vltools.cli, each phase's functions wrapped (`TIMED`): the time of
a call, or of each step of a generator it returns, goes to its phase, less what the phases nested in it took (the
features read inside the model's loop are reading, not model), with a CUDA device synchronised around each. It
prints one JSON object, phase -> seconds; `measure` runs it as a fresh process and adds the interpreter's own start
(`python -c pass`) and what the process spent outside every phase (its exit). `--stand-in` replaces each loaded
network (after the real checkpoint load) by `StandIn`, which returns random scores at once: every other phase then
runs at full size in seconds where the real model would take most of an hour on a CPU; the model is timed by a
second run without it.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
INTERPRETER = "interpreter start (python -c pass)"
IMPORT_TORCH = "import torch"
IMPORT_VLTOOLS = "import vltools (the modules match runs)"
CUDA = "CUDA initialisation (context, cuBLAS)"
LOAD = "checkpoint load"
DIGESTS = "checkpoint digests (SHA-256, for the provenance)"
CAPTIONS = "read the captions (JSONL, split)"
CHECK_IMAGES = "check the images are in the features"
TOKENISE = "vocabulary and tokenising"
FEATURES = "reading features (HDF5)"
MODEL = "model (encoding, every pair)"
CHECKPOINT = "resume checkpoint OUT.partial (keep, read back, remove)"
TOPK = "top-k of each row and column"
RANKINGS = "rankings: records built and written (JSONL)"
SIMS = "writing --sims (HDF5)"
REST = "the rest of the command (options, checks, locks, moving the models)"
EXIT = "the rest of the process (exit, what no phase covers)"
# (module, attribute path, phase): the functions each phase runs, wrapped where `match` looks them up
TIMED = (
    ("vltools.infer.loader", "load_models", LOAD),
    ("vltools.infer.loader", "file_digest", DIGESTS),
    ("vltools.infer.match", "read_split", CAPTIONS),
    ("vltools.infer.match", "check_images", CHECK_IMAGES),
    ("vltools.infer.loader", "LoadedModel.tokenize", TOKENISE),
    ("vltools.io.features", "FeaturesReader.__init__", FEATURES),
    ("vltools.io.features", "FeaturesReader.read", FEATURES),
    ("vltools.infer.match", "similarity_columns", MODEL),
    ("vltools.io.checkpoint", "Checkpoint.__init__", CHECKPOINT),
    ("vltools.io.checkpoint", "Checkpoint.add", CHECKPOINT),
    ("vltools.io.checkpoint", "Checkpoint.gather", CHECKPOINT),
    ("vltools.io.checkpoint", "Checkpoint.remove", CHECKPOINT),
    ("vltools.infer.match", "topk_rows", TOPK),
    ("vltools.infer.match", "Matches.rankings", RANKINGS),
    ("vltools.stages.match", "write_records", RANKINGS),
    ("vltools.stages.match", "write_sims", SIMS),
)
MODULES = ("vltools.cli", "vltools.commands.match", *dict.fromkeys(module for module, _, _ in TIMED))


class PhaseClock:
    """Seconds per phase, each phase's own: time spent in a phase nested inside another counts for the inner one."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.seconds: dict[str, float] = {}
        self.nested: list[float] = []      # per open phase, the seconds its nested phases took

    def timed(self, phase: str, step: Callable[[], object]) -> object:
        """`step()`, its time (the device synchronised before and after) less its nested phases' added to `phase`."""
        from machine import synchronize

        synchronize(self.device)
        start = time.perf_counter()
        self.nested.append(0.0)
        try:
            return step()
        finally:
            synchronize(self.device)
            spent = time.perf_counter() - start
            inner = self.nested.pop()
            self.seconds[phase] = self.seconds.get(phase, 0.0) + spent - inner
            if self.nested:
                self.nested[-1] += spent

    def wrap(self, function: Callable, phase: str) -> Callable:
        """`function` timed into `phase`; a generator it returns is timed step by step."""

        @functools.wraps(function)
        def wrapper(*args: object, **kwargs: object) -> object:
            result = self.timed(phase, lambda: function(*args, **kwargs))
            return self.steps(result, phase) if isinstance(result, Iterator) else result

        return wrapper

    def steps(self, iterator: Iterator, phase: str) -> Iterator:
        """Each item of `iterator`, the time to make it counted in `phase`."""
        done = object()
        while (item := self.timed(phase, lambda: next(iterator, done))) is not done:
            yield item


def stand_in_models(load_models: Callable) -> Callable:
    """`load_models` whose loaded models' networks are replaced by `StandIn` (the checkpoints are still loaded)."""
    from torch import nn

    class StandIn(nn.Module):
        """In place of SGR and SAF: the inputs as their own embeddings, random scores for every pair in [0.45, 0.55)
        (random SGRAF's range), so that top-k and writing see real-looking numbers."""

        def encode_images(self, regions, counts=None):
            return regions

        def encode_captions(self, tokens, lengths):
            return tokens

        def similarity(self, images, captions, lengths):
            import torch

            return 0.45 + 0.1 * torch.rand(len(images), len(lengths))

    def loaded(paths: Sequence[str]) -> list:
        found = load_models(paths)
        for item in found:
            item.model = StandIn()
        return found

    return loaded


def run_match(argv: list[str], stand_in: bool = False) -> dict[str, float]:
    """`vltools --quiet match ARGV` in this process, its phases timed; phase -> seconds."""
    clock = PhaseClock()
    start = time.perf_counter()
    import torch

    clock.seconds[IMPORT_TORCH] = time.perf_counter() - start
    start = time.perf_counter()
    modules = {name: importlib.import_module(name) for name in MODULES}
    clock.seconds[IMPORT_VLTOOLS] = time.perf_counter() - start
    from vltools.devices import resolve_device

    clock.device = str(resolve_device(argv[argv.index("--device") + 1] if "--device" in argv else "auto"))
    if clock.device.startswith("cuda"):
        clock.timed(CUDA, lambda: (torch.ones(8, 8, device=clock.device) @ torch.ones(8, 8, device=clock.device))
                    .sum().item())
    for module, path, phase in TIMED:
        *classes, name = path.split(".")
        owner = functools.reduce(getattr, classes, modules[module])
        setattr(owner, name, clock.wrap(getattr(owner, name), phase))
    if stand_in:
        loader = modules["vltools.infer.loader"]
        loader.load_models = stand_in_models(loader.load_models)
    clock.timed(REST, lambda: modules["vltools.cli"].main(["--quiet", "match", *argv]))
    return clock.seconds


@dataclass(frozen=True)
class Measured:
    """A `match` process's phases (seconds, the interpreter's start and its exit included) and its wall time."""

    phases: dict[str, float]
    wall_s: float

    @property
    def outside_model(self) -> float:
        """Every phase but the model's."""
        return sum(spent for phase, spent in self.phases.items() if phase != MODEL)


def measure(match_argv: Sequence[str], env: Mapping[str, str] | None = None, stand_in: bool = False) -> Measured:
    """`phases.py [--stand-in] MATCH_ARGV` as a fresh process (machine.measured_run), with the interpreter's own
    start measured beside it (median of 3) and what no phase covers."""
    from help import median_wall
    from machine import measured_run

    run = measured_run([sys.executable, os.path.join(BENCHMARKS, "phases.py"), *(["--stand-in"] if stand_in else []),
                        *match_argv], env)
    phases = {INTERPRETER: median_wall([sys.executable, "-c", "pass"], 3), **json.loads(run.stdout.splitlines()[-1])}
    phases[EXIT] = run.wall_s - sum(phases.values())
    return Measured(phases, run.wall_s)


def print_phases(measured: Mapping[str, Measured]) -> None:
    """A table of the phases, one column per run (its name: what was measured, at what size)."""
    labels = list(dict.fromkeys(phase for run in measured.values() for phase in run.phases))
    for name, run in measured.items():
        print(f"  [{chr(ord('A') + list(measured).index(name))}] {name}: {run.wall_s:.2f} s wall", flush=True)
    print(f"  {'phase':70s}" + "".join(f"{'[' + chr(ord('A') + n) + ']':>10s}" for n in range(len(measured))))
    for label in labels:
        cells = "".join(f"{run.phases[label]:10.2f}" if label in run.phases else f"{'-':>10s}"
                        for run in measured.values())
        print(f"  {label:70s}{cells}", flush=True)
    print(f"  {'everything but the model':70s}" + "".join(f"{run.outside_model:10.2f}" for run in measured.values()),
          flush=True)


def main() -> None:
    stand_in = sys.argv[1:2] == ["--stand-in"]
    print(json.dumps(run_match(sys.argv[2 if stand_in else 1:], stand_in)))


if __name__ == "__main__":
    main()
