"""Training: the loop every model shares (`trainer`), its configuration (`config`), one task per model family.

A task module (e.g. `matching`) provides `defaults(model_name)` (its `task` and `model` config
sections) and `build_task(model_name, inputs, config, vocab=, train_split=, val_split=)`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from vltools.training.config import TRAIN_DEFAULTS

# model name -> task module under vltools.training.tasks
TASKS = {"sgr": "matching", "saf": "matching", "vse": "matching", "rmac": "semantic"}
TASKS.update({"neuraltalk2": "captioning", "adaptive-attention": "captioning"})
TASKS.update({"sco": "sco", "concepts": "concepts"})
TASKS.update({"l2c": "l2c"})


def task_module(model_name: str) -> ModuleType:
    """The module that trains `model_name`."""
    return importlib.import_module(f"vltools.training.tasks.{TASKS[model_name]}")


def config_defaults(model_name: str) -> dict[str, dict[str, object]]:
    """All config sections for `model_name`: `train` (the loop), `task` and `model`."""
    return {"train": dict(TRAIN_DEFAULTS), **task_module(model_name).defaults(model_name)}  # a task may set `train`
