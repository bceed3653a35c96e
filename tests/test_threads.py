"""The CPU threads a stage computes with: --threads, else OMP_NUM_THREADS, else the CPUs this process may use."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from matching_helpers import make_world, save_tiny
from pipeline_fixtures import run_process

from vltools import threads
from vltools.cli import STAGES, cli
from vltools.threads import cpu_quota, default_threads, usable_cpus, use_threads


@pytest.mark.parametrize("files, quota", [
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
])
def test_the_cgroup_cpu_quota(tmp_path, files, quota):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cpu_quota(tmp_path) == quota


def test_usable_cpus_are_the_affinity_at_most_the_quota_rounded_up(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert usable_cpus(tmp_path) == 8
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert usable_cpus(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("2000000 100000\n")
    assert usable_cpus(tmp_path) == 8


@pytest.mark.parametrize("value, expected", [("3", 3), ("4,2", 4), (" 5 ", 5), ("0", 6), ("many", 6), ("", 6)])
def test_omp_num_threads_when_set_else_the_usable_cpus(monkeypatch, tmp_path, value, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)))
    monkeypatch.setattr(threads, "CGROUP", tmp_path)       # no quota
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert default_threads() == expected


def test_use_threads_sets_the_variable_and_a_loaded_torch(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    before = torch.get_num_threads()
    try:
        assert use_threads(1) == 1
        assert os.environ["OMP_NUM_THREADS"] == "1" and torch.get_num_threads() == 1
        assert use_threads() == 1                            # the variable it set is the default from now on
    finally:
        torch.set_num_threads(before)


COMPUTING = {"extract-regions", "segment-pool", "concept-scores", "encode", "match", "caption", "train", "index",
             "tfidf-proxy", "explain", "synth-backbone", "mine-triplets", "search"}


def test_every_computing_stage_takes_threads():
    takes = {name for name in STAGES if "--threads" in {opt for p in cli.get_command(None, name).params
                                                        for opt in getattr(p, "opts", ())}}
    assert takes == COMPUTING


# runs a stage in a fresh interpreter restricted to CPU 0 and prints torch's threads and what the stage said
ON_ONE_CPU = """
import contextlib, io, json, os, sys
os.sched_setaffinity(0, {0})
from vltools.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    main(sys.argv[1:])
import torch
print(json.dumps({"threads": torch.get_num_threads(), "variable": os.environ.get("OMP_NUM_THREADS"),
                  "err": err.getvalue()}))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to restrict a process to one")
def test_a_stage_computes_on_the_cpus_it_may_use_or_with_threads(tmp_path):
    """Torch's default is a thread per core of the machine, whatever the process may use."""
    features, _ = make_world(tmp_path, n_images=2, per_image=1)
    vse = save_tiny(tmp_path / "vse.pt", "vse")
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    runs = {}
    for name, extra in (("default", []), ("given", ["--threads", "2"])):
        result = run_process([sys.executable, "-c", ON_ONE_CPU, "encode", "--model", vse, features, *extra, "-o",
                              tmp_path / f"{name}.h5"], capture_output=True, env=env)
        assert result.returncode == 0, result.stderr.decode()
        runs[name] = json.loads(result.stdout)
    assert (runs["default"]["threads"], runs["default"]["variable"]) == (1, "1")
    assert (runs["given"]["threads"], runs["given"]["variable"]) == (2, "2")
    assert "vltools: --threads asks for 2 threads on the 1 CPU this process may use: they will wait for each " \
           "other; give --threads 1 or fewer" in runs["given"]["err"]
