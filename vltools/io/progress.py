"""Logging and progress on standard error: a tqdm bar on a terminal, periodic plain lines otherwise."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")

_state: dict[str, object] = {"quiet": False, "interval": 10.0, "label": ""}
log = logging.getLogger("vltools")


class _Label(logging.Filter):
    """Adds the current label (see `labelled`) to each record, for the formatter."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.label = f"{_state['label']}: " if _state["label"] else ""
        return True


def configure(quiet: bool = False, debug: bool = False, interval: float = 10.0) -> None:
    """Set up the `vltools` logger once per process; `quiet` silences progress and info lines."""
    _state["quiet"] = quiet
    _state["interval"] = interval
    level = logging.DEBUG if debug else (logging.WARNING if quiet else logging.INFO)
    log.setLevel(level)
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.addFilter(_Label())
        handler.setFormatter(logging.Formatter("vltools: %(label)s%(message)s"))
        log.addHandler(handler)
    log.propagate = False


@contextlib.contextmanager
def labelled(label: str) -> Iterator[None]:
    """Prefix every log and progress line with `label` while the block runs: the lines of two runs side by side
    (two trainings under `make -j2`) then say which run they belong to."""
    previous = _state["label"]
    _state["label"] = label
    try:
        yield
    finally:
        _state["label"] = previous


@contextlib.contextmanager
def quiet_children() -> Iterator[None]:
    """Under --quiet, send what child processes started in the block write on standard error (the Java tools of
    pycocoevalcap: "PTBTokenizer tokenized ...") to nowhere; --quiet promises silence, not only from vltools."""
    if not _state["quiet"]:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    nowhere = os.open(os.devnull, os.O_WRONLY)
    os.dup2(nowhere, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(nowhere)


def progress(items: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it",
             size: Callable[[T], int] | None = None, status: Callable[[], str] | None = None) -> Iterator[T]:
    """Yield `items` while reporting progress on stderr (bar on a TTY, a line every few seconds otherwise).

    `total` and the count are in `unit`: each item counts `size(item)` units (a batch counts its images, so that
    counts are in the unit the user gave) or 1; `status()`, when given, is shown at the end of each line (the
    training loss)."""
    if _state["quiet"]:
        yield from items
        return
    desc = f"{_state['label']}: {desc}" if _state["label"] else desc
    if sys.stderr.isatty():
        with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False) as bar:
            for item in items:
                yield item
                bar.update(size(item) if size is not None else 1)
                if status is not None:
                    bar.set_postfix_str(status(), refresh=False)
        return
    start = last = time.monotonic()
    count = 0
    for item in items:
        yield item
        count += size(item) if size is not None else 1
        now = time.monotonic()
        if now - last >= _state["interval"]:
            last = now
            of = f"/{total}" if total is not None else ""
            rate = count / max(now - start, 1e-9)
            extra = f" {status()}".rstrip() if status is not None else ""
            print(f"vltools: {desc} {count}{of} {unit} ({rate:.1f} {unit}/s){extra}", file=sys.stderr, flush=True)
