"""The one hang guard of the tests' subprocesses: generous, and a run that trips it says how long and at what
load, so that a busy machine is not read as a broken feature."""

from __future__ import annotations

import subprocess
import sys

import pipeline_fixtures
import pytest

HANGS = [sys.executable, "-c", "import threading; threading.Event().wait()"]  # blocks until killed


def test_the_guard_is_generous():
    assert 900 <= pipeline_fixtures.HANG_GUARD_S <= 1800


def test_a_hung_run_fails_with_the_time_and_the_load(monkeypatch):
    monkeypatch.setattr(pipeline_fixtures, "HANG_GUARD_S", 1)
    with pytest.raises(pytest.fail.Exception, match=r"-c 'import threading; threading.Event\(\).wait\(\)': timed out "
                                                    r"after 1 s at load \d+\.\d, \d+\.\d, \d+\.\d \(1, 5, 15 min; "
                                                    r"\d+ cores\)$"):
        pipeline_fixtures.run_process(HANGS, capture_output=True)
    process = subprocess.Popen(HANGS, stdout=subprocess.PIPE)
    with pytest.raises(pytest.fail.Exception, match="timed out after 1 s at load"):
        pipeline_fixtures.communicate(process)
    assert process.returncode is not None  # killed, not left running


def test_a_finished_run_is_returned_as_subprocess_run_returns_it():
    result = pipeline_fixtures.run_process([sys.executable, "-c", "print('ok')"], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, "ok\n")
