"""What the tests that run stages share: running a stage in-process or under torchrun, comparing outputs, making the
synthetic world, and the one hang guard of every subprocess a test starts."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import h5py
import pytest
import torch
from click.testing import CliRunner
from filelock import FileLock

import vltools
from vltools.cli import cli

# The hang guard of every subprocess a test runs: twice the longest run measured (the SCO recipe miniature, 9 min
# on 2 cores), so that only a hang trips it, not a busy machine.
HANG_GUARD_S = 1800


def timed_out(command: Sequence[object] | str, seconds: float) -> str:
    """What a test that hit the hang guard says: the command, the time and the machine's load then, so that a
    slow machine is not read as a broken feature."""
    shown = command if isinstance(command, str) else shlex.join(map(str, command))
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return f"{shown[:200]}: timed out after {seconds:.0f} s at load {load} (1, 5, 15 min; {os.cpu_count()} cores)"


def run_process(command: Sequence[object] | str, **kwargs: object) -> subprocess.CompletedProcess:
    """subprocess.run(command, **kwargs) under the hang guard; tripping it fails the test with `timed_out`."""
    try:
        return subprocess.run(command, timeout=HANG_GUARD_S, **kwargs)
    except subprocess.TimeoutExpired:
        pytest.fail(timed_out(command, HANG_GUARD_S))


def communicate(process: subprocess.Popen) -> tuple[object, object]:
    """process.communicate() under the hang guard; tripping it kills the process and fails the test."""
    try:
        return process.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(timed_out(process.args, HANG_GUARD_S))


def run(*args: object) -> str:
    """Run `vltools --quiet ARGS` in-process; a non-zero exit fails the test with the stage's output."""
    result = CliRunner().invoke(cli, ["--quiet", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def synth_world(folder: Path, images: int, pairs: int = 0, aux_images: int = 0) -> Path:
    """The deterministic synthetic world (seed 0) of `images` images, `pairs` image pairs and `aux_images`
    single images with captions, written to `folder`."""
    run("synth", folder, "--seed", "0", "--images", images, "--pairs", pairs, "--aux-images", aux_images)
    return folder


def trained_backbone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recipes' synthetic extractor (`vltools synth-backbone`, a ResNet-18 trained on a 400-image world's
    labels, 4 epochs), made once per test session and shared by the pytest-xdist workers (behind a file lock)."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "synth_backbone"
    shared.mkdir(exist_ok=True)
    weights = shared / "synth_resnet18.pt"
    with FileLock(str(shared / "lock")):
        if not weights.exists():
            world = synth_world(shared / "world", 400)
            run("synth-backbone", world, "--epochs", 4, "--seed", 0, "--device", "cpu", "-o", weights)
    return weights


def free_port() -> int:
    """A TCP port nothing listens on now, for a torchrun job's rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(*args: object, cwd: Path | None = None, processes: int = 2) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node PROCESSES -m vltools ARGS` on this machine (gloo on CPU), output captured as
    text; sys.argv[0] of each process is vltools/__main__.py, as under `python -m vltools`, and each computes on
    one thread (OMP_NUM_THREADS=1, torchrun's default made explicit)."""
    return run_process([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes),
                        "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "vltools",
                        *map(str, args)], capture_output=True, text=True, cwd=cwd,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})


def torchrun_nodes(*args: object, cwd: Path, nodes: int = 2) -> list[subprocess.CompletedProcess]:
    """`torchrun --nnodes NODES --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT -m vltools
    ARGS` launched NODES times at once on this machine, as many machines would start it (one process each, on one
    thread), sharing the rendezvous; their outputs captured as text."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "vltools-test",
               "-m", "vltools", *map(str, args)]
    launched = [subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"}) for _ in range(nodes)]
    done = []
    for process in launched:
        out, err = process.communicate(timeout=HANG_GUARD_S)
        done.append(subprocess.CompletedProcess(command, process.returncode, out, err))
    return done


def one_and_two_processes(folder: Path, monkeypatch: pytest.MonkeyPatch, *args: object,
                          processes: int = 2) -> tuple[Path, Path]:
    """Run `vltools --quiet ARGS` in `folder/one`, in this process but as `python -m vltools` would (the same
    sys.argv), and under torchrun with `processes` processes in `folder/two`; return the two folders. Outputs named
    by relative paths then record the same command line. Every process computes on one thread, as torchrun's
    processes do by default (OMP_NUM_THREADS=1): CPU sums may depend on the number of threads."""
    one, two = folder / "one", folder / "two"
    one.mkdir(parents=True)
    two.mkdir()
    threads = torch.get_num_threads()
    with monkeypatch.context() as patch:
        patch.chdir(one)
        patch.setattr(sys, "argv", [str(Path(vltools.__file__).with_name("__main__.py")), "--quiet", *map(str, args)])
        torch.set_num_threads(1)
        try:
            run(*args)
        finally:
            torch.set_num_threads(threads)
    done = torchrun("--quiet", *args, cwd=two, processes=processes)
    assert done.returncode == 0, done.stderr
    return one, two


def merged(parts: Path) -> Path:
    """`vltools merge PARTS -o PARTS.merged`: the one file of a folder of parts, as one process writes it."""
    target = parts.with_name(f"{parts.name}.merged")
    run("merge", str(parts), "-o", str(target))
    return target


def same_but_created(first: Path, second: Path) -> None:
    """Assert that two HDF5 outputs hold the same bytes except their creation time (the `created` attribute, a
    fixed-length time stamp, found once in each file)."""
    contents = []
    for path in (first, second):
        with h5py.File(path, "r") as handle:
            created = str(handle.attrs["created"]).encode()
        content = path.read_bytes()
        assert content.count(created) == 1, path
        contents.append(content.replace(created, b"?" * len(created)))
    assert contents[0] == contents[1], f"{first} and {second} differ beyond their creation time"
