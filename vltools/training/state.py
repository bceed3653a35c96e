"""What makes a training run resumable and reproducible: seeds and RNG states, deterministic kernels, the
resume file's checks (config and inputs unchanged), and the JSON training log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch

from vltools.errors import VLToolsError
from vltools.io.fields import INTEGER, MAPPING, NUMBER, REQUIRED, Kind, field, optional
from vltools.io.jsonl import write_json_lines
from vltools.io.numbers import dumps
from vltools.io.output import written
from vltools.io.write_errors import output_error

# keys that may change between a run and its --resume (the rest fix the data order and the model)
RESUMABLE_CHANGES = {"epochs", "workers", "device", "val_every", "save_every", "save_seconds", "log_every",
                     "keep_best"}
NOT_RESUMABLE = ("it is not a resume file of vltools train (a finished checkpoint keeps no optimizer state); "
                 "start again without --resume")
RNG_STATES = Kind("a list of RNG states (one per process)", lambda value: isinstance(value, (list, tuple)) and all(
    isinstance(state, dict) and isinstance(state.get("torch"), torch.Tensor) and state["torch"].dtype == torch.uint8
    for state in value), list)
# what --resume restores from the resume file's train_state: (kind, default when absent)
RESUME_FIELDS = {"optimizer": (MAPPING, REQUIRED), "epoch": (INTEGER, REQUIRED), "step": (INTEGER, REQUIRED),
                 "iteration": (INTEGER, REQUIRED), "rng": (RNG_STATES, REQUIRED), "log_lines": (INTEGER, REQUIRED),
                 "config": (MAPPING, {}), "inputs": (optional(MAPPING), None), "scaler": (optional(MAPPING), None),
                 "skipped_steps": (INTEGER, 0)}


def seed_everything(seed: int) -> None:
    """Seed the generators that model construction uses (the same on every process)."""
    torch.manual_seed(seed)


def rng_state(device: torch.device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class JsonLog:
    """The JSONL training log: one object a line, flushed at once; `lines` counts what was written."""

    def __init__(self, path: Path, keep: int | None, enabled: bool) -> None:
        self.path, self.enabled, self.lines = path, enabled, 0
        if not enabled:
            return
        kept = []
        if keep is not None and path.exists():
            kept = path.read_text(encoding="utf-8").splitlines(keepends=True)[:keep]
        with written(path) as tmp:
            tmp.write_text("".join(kept), encoding="utf-8")
        self.lines = len(kept)

    def write(self, record: dict) -> None:
        if self.enabled:
            try:
                with open(self.path, "a", encoding="utf-8") as stream:
                    write_json_lines(stream, [record], dumps)
            except OSError as exc:
                raise output_error(self.path, exc) from exc
            self.lines += 1


def sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def resume_state(payload: dict, path: Path, metric: str) -> dict:
    """What `--resume` restores from the resume file `path` (its loaded `payload`): the `RESUME_FIELDS` of its
    train_state and `best` (its best `metric`), each checked for type, so that a finished checkpoint or a damaged
    one is one line naming the field and not a KeyError halfway through restoring."""
    state = {key: field(payload, f"train_state.{key}", kind, path, NOT_RESUMABLE, default=default)
             for key, (kind, default) in RESUME_FIELDS.items()}
    state["best"] = field(payload, f"train_state.best_{metric}", optional(NUMBER), path, NOT_RESUMABLE, default=None)
    return state


def interrupted_at(payload: dict, path: Path) -> str | None:
    """Where the run that wrote the resume file `path` (its loaded `payload`) stopped ("in epoch 16 of 20, after
    iteration 300"), when it stopped before its last epoch ended; None for a finished run, whose file a plain run
    replaces."""
    epoch = field(payload, "train_state.epoch", INTEGER, path, NOT_RESUMABLE)
    step = field(payload, "train_state.step", INTEGER, path, NOT_RESUMABLE)
    epochs = field(payload, "train_state.config.train.epochs", INTEGER, path, NOT_RESUMABLE, default=None)
    if step == 0 and epochs is not None and epoch >= epochs:
        return None
    iteration = field(payload, "train_state.iteration", INTEGER, path, NOT_RESUMABLE)
    of = f" of {epochs}" if epochs is not None else ""
    return f"in epoch {epoch + 1}{of}, after iteration {iteration}"


def check_resumable(saved: dict, config: dict, path: Path) -> None:
    """Refuse to resume with other settings than the resume file's `saved` config (but `RESUMABLE_CHANGES`)."""
    for section, values in config.items():
        recorded = field(saved, section, MAPPING, path, NOT_RESUMABLE, default={})
        for key, value in values.items():
            old = recorded.get(key, value)
            if old != value and key not in RESUMABLE_CHANGES:
                raise VLToolsError(f"{path}: was written with {section}.{key}={old!r}, now {value!r}; resume with "
                                   "the same settings, or start again without --resume")


def check_inputs(saved: dict, inputs: dict, path: Path) -> None:
    """Refuse to resume training on other data: every input recorded in the resume file (paths, split sizes,
    caption-id digests, ...) must be the same now; one line names the first that differs."""
    for key, old in saved.items():
        value = inputs.get(key)
        if old != value:
            raise VLToolsError(f"{path}: was written with input {key}={old!r}, now {value!r}; resume with the same "
                               "inputs, or start again without --resume")


@contextlib.contextmanager
def deterministic(enabled: bool) -> Iterator[None]:
    """Deterministic kernels for the duration of training (CPU runs are then bitwise repeatable)."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(enabled, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=True)
