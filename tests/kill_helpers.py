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


def wait_until(process: subprocess.Popen, ready: Callable[[], bool], timeout: float = 120.0) -> None:
    """Poll until `ready()` (something outside vltools, such as a child it started, is there); fail the test when
    the run ends first."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and not ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    if process.poll() is not None:
        pytest.fail(f"the run ended before it could be killed: {process.stderr.read().decode()}")


# run in the subprocess of `start_paused`: vltools ARGS, stopped for good inside the function TARGET once it has
# returned CALLS times, after writing one byte to the file descriptor READY
_PAUSING = """
import importlib, os, signal, sys
from vltools.cli import main
target, calls, ready, *args = sys.argv[1:]
module, _, path = target.partition(":")
*outer, name = path.split(".")
owner = importlib.import_module(module)
for part in outer:
    owner = getattr(owner, part)
real, returned = getattr(owner, name), []

def pausing(*given, **options):
    result = real(*given, **options)
    returned.append(result)
    if len(returned) == int(calls):
        os.write(int(ready), b"p")
        while True:
            signal.pause()
    return result

setattr(owner, name, pausing)
main(args)
"""


def start_paused(target: str, calls: int, *args: object) -> subprocess.Popen:
    """`python -m vltools -q ARGS` in a subprocess that stops for good once the function `target`
    ("module:Class.method") has returned `calls` times; returns when it has stopped there. A test kills it at a
    point it chose, whatever the machine's load: polling for a file the run writes raced a run that finished first
    on a loaded machine. Ctrl-C (SIGINT) stops it as from a terminal, even where the test runner's process ignores
    SIGINT (which its children would inherit)."""
    ready, writing = os.pipe()
    try:
        process = subprocess.Popen([sys.executable, "-c", _PAUSING, target, str(calls), str(writing), "-q",
                                    *map(str, args)], stderr=subprocess.PIPE, pass_fds=(writing,),
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    finally:
        os.close(writing)
    with os.fdopen(ready, "rb") as stream:
        paused = stream.read(1) == b"p"
    if not paused:
        process.wait()
        pytest.fail(f"the run ended before it reached {target}: {process.stderr.read().decode()}")
    return process


def kill(process: subprocess.Popen, number: int = signal.SIGKILL) -> int:
    """Send signal `number` (SIGKILL: no handler runs, nothing is cleaned up) and return the exit status."""
    return stopped(process, number)[0]


def stopped(process: subprocess.Popen, number: int) -> tuple[int, str]:
    """Send signal `number` and return the exit status and the last line of standard error."""
    os.kill(process.pid, number)
    errors = process.stderr.read().decode()
    process.stderr.close()
    lines = errors.strip().splitlines()
    return process.wait(), lines[-1] if lines else ""


def killed_midway(target: str, calls: int, *args: object) -> None:
    """Run the stage ARGS and kill it once the function `target` has returned `calls` times (`start_paused`)."""
    kill(start_paused(target, calls, *args))


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
