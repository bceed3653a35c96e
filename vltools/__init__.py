"""vltools: composable command-line stages for vision-language research, and the same stages as Python
functions (`vltools.match`, `vltools.score_retrieval`, ...: see `vltools.api`), imported on first use so that the
command line does not pay for torch before it needs it."""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

API = ("Matches", "caption", "extract_regions", "load_model", "match", "score_retrieval", "search")
__all__ = ["__version__", *API]


def __getattr__(name: str) -> object:
    if name in API:
        return getattr(importlib.import_module("vltools.api"), name)
    raise AttributeError(f"module 'vltools' has no attribute {name!r}")
