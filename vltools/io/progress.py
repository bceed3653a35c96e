"""Logging and progress on standard error: a tqdm bar on a terminal, periodic plain lines otherwise."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO, TypeVar

from tqdm import tqdm

from vltools.distributed import place

T = TypeVar("T")

_state: dict[str, object] = {"quiet": False, "interval": 10.0, "label": ""}
log = logging.getLogger("vltools")


class _Label(logging.Filter):
    """Adds the current label (see `labelled`) to each record, for the formatter."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.label = f"{_state['label']}: " if _state["label"] else ""
        return True


class _StderrHandler(logging.StreamHandler):
    """Writes each record to the standard error of the moment it is emitted: the handler is made once per process,
    and a stage run in-process (the Python API, click's test runner, pytest's capture) may have swapped
    sys.stderr since, closing the one the handler first saw."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        """StreamHandler.__init__ assigns its stream; the current sys.stderr is always used instead."""


def configure(quiet: bool = False, debug: bool = False, interval: float = 10.0) -> None:
    """Set up the `vltools` logger once per process; `quiet` silences progress and info lines, as it does on the
    processes of a torchrun job but the first (which reports for the job)."""
    _state["quiet"] = quiet
    _state["interval"] = interval
    level = logging.DEBUG if debug else (logging.WARNING if quiet or not place().main else logging.INFO)
    log.setLevel(level)
    if not log.handlers:
        handler = _StderrHandler()
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
def captured_children() -> Iterator[None]:
    """Keep what child processes started in the block write on standard output and error (pycocoevalcap's Java
    tools: "PTBTokenizer tokenized ...", SPICE's progress) out of the stage's output and a notebook's: it is
    captured, then logged at debug level (`--debug` shows it), or written to standard error when the block fails,
    where it may say why."""
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as captured:
        saved = [os.dup(1), os.dup(2)]
        os.dup2(captured.fileno(), 1)
        os.dup2(captured.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            for fd, original in zip((1, 2), saved, strict=True):
                os.dup2(original, fd)
                os.close(original)
            captured.seek(0)
            text = captured.read().decode("utf-8", "replace").strip()
            if text and failed:
                print(text, file=sys.stderr)
            elif text:
                log.debug("what the child processes wrote: %s", text)


def _significant(value: float) -> str:
    """`value` (>= 0) with at least two significant digits and no exponent: 0.031, 5.3, 12, 1234."""
    if value <= 0:
        return "0"
    return f"{value:.{max(0, 1 - math.floor(math.log10(value)))}f}"


def rate_text(count: float, seconds: float, unit: str) -> str:
    """How fast `count` `unit` went in `seconds`: "0.031 steps/s = 32 s/step" (a slow rate also per item), "5.3
    images/s", "1234 pairs/s"; "? steps/s" before any time has passed."""
    if seconds <= 0:
        return f"? {unit}/s"
    rate = count / seconds
    text = f"{_significant(rate)} {unit}/s"
    if 0 < rate < 1:
        text += f" = {_significant(1 / rate)} s/{unit.removesuffix('s')}"
    return text


def duration_text(seconds: float) -> str:
    """A duration as people read it: "42 s", "3 min 05 s", "2 h 07 min"."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds // 60 % 60:02d} min"


def progress_text(count: float, total: float | None, unit: str, seconds: float, later: float = 0) -> str:
    """One progress reading: "6/25 steps (0.031 steps/s = 32 s/step, 10 min 07 s left)". The time left is at
    the rate so far, for what remains of `total` and the `later` units that follow this loop (the next epochs);
    without a total it is left out."""
    done = f"{count}/{total} {unit}" if total is not None else f"{count} {unit}"
    details = [rate_text(count, seconds, unit)]
    if total is not None and count > 0 and seconds > 0:
        details.append(f"{duration_text((total - count + later) * seconds / count)} left")
    return f"{done} ({', '.join(details)})"


class _Bar(tqdm):
    """tqdm's bar with the counts, rate and time left of `progress_text` (tqdm rounds a slow rate to 0.03 or
    turns it into s/it, and counts its time left per loop)."""

    def __init__(self, *args: object, later: float = 0, **kwargs: object) -> None:
        self.later = later
        super().__init__(*args, **kwargs)

    @property
    def format_dict(self) -> dict:
        found = super().format_dict
        return {**found, "reading": progress_text(found["n"], found["total"], found["unit"], found["elapsed"],
                                                  self.later)}


def progress(items: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it",
             size: Callable[[T], int] | None = None, status: Callable[[], str] | None = None,
             later: int = 0) -> Iterator[T]:
    """Yield `items` while reporting progress on stderr (bar on a TTY, a line every few seconds otherwise): the
    count, the rate and the time left (see `progress_text`).

    `total` and the count are in `unit`: each item counts `size(item)` units (a batch counts its images, so that
    counts and rates are in the unit the user gave) or 1; `later` units follow this loop (a training's next
    epochs) and count in the time left; `status()`, when given, is shown at the end of each line (the training
    loss). Only the first process of a torchrun job reports."""
    if _state["quiet"] or not place().main:
        yield from items
        return
    desc = f"{_state['label']}: {desc}" if _state["label"] else desc
    if sys.stderr.isatty():
        shape = "{desc}: {percentage:3.0f}%|{bar}| {reading}{postfix}" if total else "{desc}: {reading}{postfix}"
        with _Bar(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, bar_format=shape,
                  later=later) as bar:
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
            extra = f" {status()}".rstrip() if status is not None else ""
            print(f"vltools: {desc} {progress_text(count, total, unit, now - start, later)}{extra}", file=sys.stderr,
                  flush=True)
