"""Logging and progress on standard error: a tqdm bar on a terminal, periodic plain lines otherwise."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")

_state = {"quiet": False, "interval": 10.0}
log = logging.getLogger("vltools")


def configure(quiet: bool = False, debug: bool = False, interval: float = 10.0) -> None:
    """Set up the `vltools` logger once per process; `quiet` silences progress and info lines."""
    _state["quiet"] = quiet
    _state["interval"] = interval
    level = logging.DEBUG if debug else (logging.WARNING if quiet else logging.INFO)
    log.setLevel(level)
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("vltools: %(message)s"))
        log.addHandler(handler)
    log.propagate = False


def progress(items: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it") -> Iterator[T]:
    """Yield `items` while reporting progress on stderr (bar on a TTY, a line every few seconds otherwise)."""
    if _state["quiet"]:
        yield from items
        return
    if sys.stderr.isatty():
        yield from tqdm(items, total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)
        return
    start = last = time.monotonic()
    count = 0
    for item in items:
        yield item
        count += 1
        now = time.monotonic()
        if now - last >= _state["interval"]:
            last = now
            of = f"/{total}" if total is not None else ""
            rate = count / max(now - start, 1e-9)
            print(f"vltools: {desc} {count}{of} {unit} ({rate:.1f} {unit}/s)", file=sys.stderr, flush=True)
