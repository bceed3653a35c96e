"""Shared test helpers: running the real `vltools` command in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def run_vltools(*args: str, stdin: bytes | None = None, cwd: str | Path | None = None,
                check: bool = False) -> subprocess.CompletedProcess:
    """Run `python -m vltools ARGS` and capture bytes of stdout and stderr."""
    result = subprocess.run([sys.executable, "-m", "vltools", *map(str, args)], input=stdin,
                            capture_output=True, cwd=cwd, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"vltools {' '.join(map(str, args))} failed:\n{result.stderr.decode()}")
    return result


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end tests (marked slow, minutes each) first, in their order, then the rest: with the suite
    spread over processes (make test), the long runs start at once and the short tests fill the gaps, instead of
    one long run starting last while the other processes idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def vltools_cmd():
    """The `run_vltools` function, as a fixture."""
    return run_vltools
