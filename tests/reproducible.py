"""Seed reproducibility of a training task family: the loss of every step of a short training, run as `vltools
train` runs it, with the same seed and different numbers of DataLoader workers (which must not change anything)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from vltools.training.distributed import distributed
from vltools.training.state import seed_everything
from vltools.training.trainer import train


def step_losses(build: Callable[[dict], object], config: dict, output: Path, seed: int, workers: int,
                precision: str = "fp32", device: str = "cpu") -> list[float]:
    """The logged loss of each step of one epoch of `build(config)`'s task, trained on `device` with `seed`."""
    config = {**config, "train": {**config["train"], "seed": seed, "workers": workers, "epochs": 1, "log_every": 1,
                                  "val_every": 0, "save_every": 0, "device": device, "precision": precision}}
    seed_everything(seed)  # as `vltools train` does before building the task
    task = build(config)
    with distributed(device) as env:
        train(task, config, output, env)
    with open(f"{output}.log.jsonl", encoding="utf-8") as stream:
        return [record["loss"] for record in map(json.loads, stream) if record["type"] == "train"]


def assert_same_losses_for_the_same_seed(build: Callable[[dict], object], config: dict, folder: Path) -> None:
    """Equal losses, step by step, for the same seed trained twice: in-process, then with a DataLoader worker.

    A step's loss may be 0 (a hinge loss with every margin met: R-MAC's second step is 0.0 on some CPUs), so the
    losses are only required to be finite and not all 0, for the comparison to compare something."""
    first = step_losses(build, config, folder / "a.pt", seed=3, workers=0)
    assert first and all(math.isfinite(loss) for loss in first) and any(loss != 0 for loss in first)
    assert step_losses(build, config, folder / "b.pt", seed=3, workers=1) == first
