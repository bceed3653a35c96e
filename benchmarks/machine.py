"""What the benchmarks print about the machine they ran on (its CPU, its GPU and the torch that drives it), and how
they measure a fresh process."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (else what platform knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def accelerator(device: str) -> dict[str, object]:
    """What runs the work on `device`: the GPU's model, torch's version and the CUDA and cuDNN versions it was built
    with (for a CPU device, the CPU's model and core count)."""
    import torch

    info: dict[str, object] = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
                               "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
    if torch.device(device).type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    else:
        info["cpu"] = f"{cpu_model()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"
    return info


def describe(info: dict[str, object]) -> str:
    """One line of `accelerator`'s description, to print beside a figure."""
    where = info.get("gpu") or info["cpu"]
    return f"{where}; torch {info['torch']}, CUDA {info['cuda']}, cuDNN {info['cudnn']}"


def synchronize(device: object) -> None:
    """Wait for the work queued on a CUDA `device` (a torch.device or its name), so that a clock read after it times
    that work; nothing on a CPU."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def load_average() -> tuple[float, ...]:
    """The 1, 5 and 15 minute load averages, rounded: other work competing for the CPUs."""
    return tuple(round(value, 2) for value in os.getloadavg())


# Runs the command as its own child and reports that child's rusage. A process forked from this benchmark (torch
# loaded: about 1 GB) would report at least the benchmark's peak as its ru_maxrss (the forked copy's high-water mark
# is kept through exec); this small interpreter's is a few MB.
LAUNCHER = """
import json, os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump({"exit": os.waitstatus_to_exitcode(status), "cpu_s": usage.ru_utime + usage.ru_stime,
               "maxrss_kb": usage.ru_maxrss}, out)
"""


@dataclass(frozen=True)
class Run:
    """A finished process: wall seconds, user + system CPU seconds, peak resident memory (MB), its standard output."""

    wall_s: float
    cpu_s: float
    peak_rss_mb: int
    stdout: str


def measured_run(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Run:
    """Run `argv` as a fresh process and measure it alone: wall time (with the launcher's start, about 0.03 s), its
    own CPU time and peak RSS (see LAUNCHER); a failure stops the benchmark with the command and its standard error."""
    with tempfile.TemporaryDirectory() as folder:
        usage_path, out_path, err_path = (Path(folder) / name for name in ("usage.json", "stdout", "stderr"))
        with out_path.open("wb") as out, err_path.open("wb") as err:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", LAUNCHER, str(usage_path), *argv], stdout=out, stderr=err,
                           env=None if env is None else dict(env), check=True)
            wall = time.perf_counter() - start
        usage = json.loads(usage_path.read_text())
        if usage["exit"] != 0:
            raise SystemExit(f"{' '.join(argv)} failed (exit {usage['exit']}):\n{err_path.read_text()[-4000:]}")
        return Run(round(wall, 2), round(usage["cpu_s"], 2), usage["maxrss_kb"] // 1024, out_path.read_text())
