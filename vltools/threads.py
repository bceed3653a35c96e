"""How many CPU threads a stage computes with: `--threads N`, else OMP_NUM_THREADS, else the CPUs this process may
use (its CPU affinity, at most its container's CPU quota).

Torch's own default is a thread per core of the machine. A process allowed fewer CPUs (taskset, a cgroup cpuset
or CPU quota, a batch scheduler's allocation) then runs more busy threads than it has CPUs: each parallel step
waits for threads that are not running, and OpenMP threads spinning while they wait slow every other process.

No torch at import: the command line applies the count when it parses `--threads`, before a stage imports torch
(which then starts with OMP_NUM_THREADS threads, as do faiss, BLAS and the processes the stage starts).
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

THREADS_VARIABLE = "OMP_NUM_THREADS"
# a container's CPU quota: cgroup v2 `cpu.max` ("QUOTA PERIOD" or "max PERIOD"), cgroup v1 quota and period files
CGROUP = Path("/sys/fs/cgroup")
QUOTA_FILES = (("cpu.max",), ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us"))


def cpu_quota(root: Path | None = None) -> float | None:
    """The CPUs' worth of time this process's cgroup (mounted at `root`, default CGROUP) may use (quota / period,
    e.g. 1.5), None without a quota."""
    root = CGROUP if root is None else root
    for names in QUOTA_FILES:
        try:
            fields = " ".join((root / name).read_text().strip() for name in names).split()
        except OSError:
            continue
        try:
            quota, period = float(fields[0]), float(fields[1])
        except (ValueError, IndexError):    # "max": no quota
            return None
        return quota / period if quota > 0 and period > 0 else None
    return None


def usable_cpus(root: Path | None = None) -> int:
    """The CPUs this process may run on: its affinity mask (os.cpu_count where there is none), at most its cgroup's
    CPU quota rounded up."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cpu_quota(root)
    return max(1, min(cpus, math.ceil(quota)) if quota is not None else cpus)


def default_threads() -> int:
    """The threads a stage computes with when --threads is not given: OMP_NUM_THREADS when it is set to a positive
    number (its first, for a nested list such as "4,2"), else `usable_cpus()`."""
    text = os.environ.get(THREADS_VARIABLE, "").split(",")[0].strip()
    return int(text) if text.isdigit() and int(text) > 0 else usable_cpus()


def use_threads(threads: int | None = None) -> int:
    """Compute with `threads` (None: `default_threads()`): OMP_NUM_THREADS is set, for the torch this process
    imports later and for the processes it starts, and a torch already imported is set at once. Returns the count."""
    count = threads or default_threads()
    os.environ[THREADS_VARIABLE] = str(count)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(count)
    return count
