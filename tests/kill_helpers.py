"""The kill-and-resume tests' helpers: a stage run in a subprocess and killed part way (SIGKILL, or Ctrl-C and
SIGTERM), or run in this process and stopped as Ctrl-C stops it after some batches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from vltools.cli import main


def start(*args: object) -> subprocess.Popen:
    """`python -m vltools -q ARGS` in a subprocess, its standard error captured; Ctrl-C (SIGINT) stops it as from a
    terminal, even where the test runner's process ignores SIGINT (which its children would inherit)."""
    return subprocess.Popen([sys.executable, "-m", "vltools", "-q", *map(str, args)], stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_until(process: subprocess.Popen, ready: Callable[[], bool], timeout: float = 120.0) -> None:
    """Poll until `ready()` (the run has committed some work); fail the test when the run ends first."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and not ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    if process.poll() is not None:
        pytest.fail(f"the run ended before it could be killed: {process.stderr.read().decode()}")


def kill(process: subprocess.Popen, number: int = signal.SIGKILL) -> int:
    """Send signal `number` (SIGKILL: no handler runs, nothing is cleaned up) and return the exit status."""
    os.kill(process.pid, number)
    status = process.wait()
    process.stderr.close()
    return status


def killed_midway(ready: Callable[[], bool], *args: object) -> None:
    """Run the stage ARGS and kill it once `ready()` holds."""
    process = start(*args)
    wait_until(process, ready)
    kill(process)



def interrupted_then_resumed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, module: object,
                             step: str, batches: int, *args: object) -> str:
    """Run `vltools ARGS` in this process with `module.step` (a function that yields batches) stopped as Ctrl-C
    stops it once `batches` are done (exit status 130), then `vltools ARGS --resume`; return the resumed run's
    standard error."""
    real = getattr(module, step)

    def stopped(*given: object, **options: object) -> Iterator:
        for number, batch in enumerate(real(*given, **options)):
            if number == batches:
                raise KeyboardInterrupt
            yield batch

    monkeypatch.setattr(module, step, stopped)
    with pytest.raises(SystemExit) as stop:
        main(["-q", *map(str, args)])
    assert stop.value.code == 130
    monkeypatch.undo()
    capsys.readouterr()
    main([*map(str, args), "--resume"])      # returns (no SystemExit) when the run succeeds
    return capsys.readouterr().err
