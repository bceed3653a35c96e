"""Training: the loop every model shares (`trainer`), its configuration (`config`), one task per model family.

A task module (e.g. `matching`) provides `defaults(model_name)` (its `task` and `model` config
sections) and `build_task(model_name, inputs, config, vocab=, train_split=, val_split=)`.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType

from vltools.errors import argument
from vltools.io.kinds import Placed, refuse_wrong_kinds
from vltools.training.config import TRAIN_DEFAULTS

# model name -> task module under vltools.training.tasks
TASKS = {"sgr": "matching", "saf": "matching", "vse": "matching", "rmac": "semantic"}
TASKS.update({"neuraltalk2": "captioning", "adaptive-attention": "captioning"})
TASKS.update({"sco": "sco", "concepts": "concepts"})
TASKS.update({"l2c": "l2c", "clip": "clip"})
# each family's inputs in order, by name and kind (keys of vltools.io.kinds.TAKES), where the order is fixed (sco's
# follow its config; l2c's last two are optional)
LAYOUTS = {"matching": (("FEATS.h5", "hdf5"), ("CAPS.jsonl", "jsonl")),
           "captioning": (("FEATS.h5", "hdf5"), ("CAPS.jsonl", "jsonl")),
           "semantic": (("IMAGES.jsonl", "jsonl"), ("PROXY.h5", "hdf5")),
           "concepts": (("IMAGES", "images"), ("CAPS.jsonl", "jsonl"), ("CONCEPTS.json", "json")),
           "clip": (("IMAGES", "images"), ("CAPS.jsonl", "jsonl"))}


def check_inputs(model_name: str, found: Sequence[tuple[str, str]]) -> None:
    """Refuse, in one line and before anything is read, an input of `model_name` whose kind is not the one its
    place takes, naming two inputs given in each other's places (`train --model vse CAPS.jsonl FEATS.h5` was
    'FEATS.h5: line 1: not UTF-8 text; convert the file to UTF-8'). `found`: (the input as named in messages, the
    kind found: a key of vltools.io.kinds.FOUND) of each input, in order."""
    layout = LAYOUTS.get(TASKS[model_name])
    if layout is None:
        return
    placed = [Placed(name, label, (takes,), kind)      # a count the layout does not fit is the task's own error
              for (name, kind), (label, takes) in zip(found, layout, strict=False)]
    refuse_wrong_kinds(placed, f"{argument('model', model_name)} takes {' '.join(label for label, _ in layout)}")


def task_module(model_name: str) -> ModuleType:
    """The module that trains `model_name`."""
    return importlib.import_module(f"vltools.training.tasks.{TASKS[model_name]}")


def config_defaults(model_name: str) -> dict[str, dict[str, object]]:
    """All config sections for `model_name`: `train` (the loop), `task` and `model`."""
    return {"train": dict(TRAIN_DEFAULTS), **task_module(model_name).defaults(model_name)}  # a task may set `train`
