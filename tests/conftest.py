"""Shared test helpers: running the real `vltools` command in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cuda_helpers import skip_reason
from pipeline_fixtures import run_process

DATA = Path(__file__).parent / "data"


def run_vltools(*args: str, stdin: bytes | None = None, cwd: str | Path | None = None,
                check: bool = False) -> subprocess.CompletedProcess:
    """Run `python -m vltools ARGS` and capture bytes of stdout and stderr."""
    result = run_process([sys.executable, "-m", "vltools", *map(str, args)], input=stdin,
                         capture_output=True, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"vltools {' '.join(map(str, args))} failed:\n{result.stderr.decode()}")
    return result


# The end-to-end test files, longest first (measured on 2 cores, 2026-11-24: the SCO recipe miniatures 9 min,
# the SGRAF pipeline 7, the CL and L2C recipe miniatures 4-5, the rest 1-2); files not listed follow in file order.
LONGEST_FIRST = ("test_examples_sco", "test_pipeline_sgraf", "test_examples_cl", "test_examples_l2c",
                 "test_pipeline_sco", "test_pipeline_cl", "test_recipe_sgraf", "test_semantic_real_recipe")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker computes on its share of the cores (and so do the vltools processes its
    tests start, through OMP_NUM_THREADS): torch's default of one thread a core in each of N workers runs N times
    more busy threads than cores, and spinning OpenMP threads then slow every worker down. An OMP_NUM_THREADS
    set by the caller is kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, len(os.sched_getaffinity(0)) // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import torch

        torch.set_num_threads(threads)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end tests (marked slow, minutes each) first, longest first, then the rest: with the suite spread
    over processes (make test), the long runs start at once and the short tests fill the gaps, instead of one
    long run starting last while the other processes idle. The tests marked `cuda` are skipped, with the reason,
    where their second device is missing (tests/cuda_helpers.py)."""
    gpu_tests = [item for item in items if item.get_closest_marker("cuda") is not None]
    reason = skip_reason() if gpu_tests else None
    if reason is not None:
        for item in gpu_tests:
            item.add_marker(pytest.mark.skip(reason=reason))

    def order(item: pytest.Item) -> tuple[bool, int]:
        name = item.path.stem
        return item.get_closest_marker("slow") is None, \
            LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=order)


@pytest.fixture
def vltools_cmd():
    """The `run_vltools` function, as a fixture."""
    return run_vltools
